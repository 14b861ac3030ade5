"""Cut points of an integer key into ranges of about equal rows, from the database's own estimates.

Cutting by value — lo + i·(hi − lo)/parts — is free, but a few keys far from the rest put every row
in one range: the chaos soak's marker rows (ids from 10^12 above ids 1..70,000) made a MariaDB
full load read 70,168 rows in one partition and 21 in the other, at a tenth of its speed, for
minutes in which every fault on the way failed it again. Here each cut is found by bisecting on
the key's value with `rows_below(v)`: how many rows have a key below v, as the database estimates
it from its index (MariaDB's EXPLAIN: a few index dives, no scan). About log2(hi − lo) estimates
per cut: 40 for keys up to 10^12.
"""
from __future__ import annotations

from typing import Callable


def even_cuts(lo: int, hi: int, parts: int, rows_below: Callable[[int], int]) -> list[int]:
    """Increasing cut points strictly inside (lo, hi]: range i holds the keys from cut i−1 up to
    (not including) cut i, each about 1/parts of the rows. Fewer cuts when the keys are fewer."""
    seen: dict[int, int] = {}

    def below(v: int) -> int:
        if v not in seen:
            seen[v] = rows_below(v)
        return seen[v]
    total = below(hi + 1)
    cuts: list[int] = []
    for i in range(1, parts):
        want = total * i / parts
        a, b = (cuts[-1] + 1 if cuts else lo + 1), hi
        if a > b:
            break
        while a < b:   # the smallest v whose estimate reaches `want`
            mid = (a + b) // 2
            if below(mid) >= want:
                b = mid
            else:
                a = mid + 1
        cuts.append(a)
    return cuts

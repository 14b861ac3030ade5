"""core.key_cuts: ranges of about equal rows however the integer keys lie."""
import bisect

from tideline.core.key_cuts import even_cuts


def counts(keys: list[int], cuts: list[int]) -> list[int]:
    edges = [min(keys)] + cuts + [max(keys) + 1]
    return [bisect.bisect_left(keys, b) - bisect.bisect_left(keys, a) for a, b in zip(edges, edges[1:])]


def test_a_few_keys_far_above_the_rest_do_not_put_every_row_in_one_range():
    keys = sorted(list(range(1, 70_001)) + [10 ** 12 + i for i in range(21)])   # the soak's markers
    cuts = even_cuts(keys[0], keys[-1], 2, lambda v: bisect.bisect_left(keys, v))
    assert counts(keys, cuts) == [35_011, 35_010]


def test_dense_keys_cut_as_by_value_and_sparse_ones_by_rows():
    dense = list(range(1, 1001))
    assert counts(dense, even_cuts(1, 1000, 4, lambda v: bisect.bisect_left(dense, v))) == [250] * 4
    skewed = sorted([i * i for i in range(1, 2001)])   # ever sparser
    parts = counts(skewed, even_cuts(skewed[0], skewed[-1], 8, lambda v: bisect.bisect_left(skewed, v)))
    assert sum(parts) == 2000 and max(parts) - min(parts) <= 1


def test_fewer_keys_than_parts_and_rough_estimates_still_give_increasing_cuts():
    keys = [5, 6, 7]
    cuts = even_cuts(5, 7, 10, lambda v: bisect.bisect_left(keys, v))
    assert cuts == sorted(set(cuts)) and all(5 < c <= 7 for c in cuts)
    rough = list(range(0, 10_000, 3))   # an estimate off by up to a third still cuts near the quantiles
    cuts = even_cuts(0, 9_999, 4, lambda v: int(bisect.bisect_left(rough, v) * (1.3 if v % 2 else 0.8)))
    assert cuts == sorted(set(cuts)) and len(cuts) == 3

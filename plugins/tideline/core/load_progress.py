"""How far a running full load is, in one line and one fraction (status, the view, the metrics) —
pure. Its end is what the load expects to store (a consistent snapshot's count, a chunked load's
estimate); its pace is the rows stored per second since it started copying."""
from __future__ import annotations

from dataclasses import dataclass

from tideline.core.readable import duration


@dataclass(frozen=True)
class LoadProgress:
    rows_done: int
    rows_total: int | None          # expected; None when unknown
    rows_per_s: float | None
    chunks_done: int | None = None  # a chunked load's chunks committed, of `chunks`
    chunks: int | None = None
    estimated: bool = False         # rows_total is the source's estimate, not a count

    @property
    def fraction(self) -> float | None:
        if not self.rows_total:
            return None
        return min(1.0, self.rows_done / self.rows_total)

    @property
    def eta_s(self) -> float | None:
        """Seconds left at the current pace (None without a pace or an end)."""
        if not self.rows_per_s or not self.rows_total:
            return None
        return max(0.0, (self.rows_total - self.rows_done) / self.rows_per_s)

    def line(self) -> str:
        total = f" of {'~' if self.estimated else ''}{self.rows_total:,}" if self.rows_total else ""
        pct = f" ({self.fraction:.0%})" if self.fraction is not None else ""
        chunks = f", chunk {self.chunks_done}/{self.chunks}" if self.chunks else ""
        speed = f", {self.rows_per_s:,.0f} rows/s" if self.rows_per_s else ""
        eta = f", ETA {duration(self.eta_s)}" if self.eta_s is not None else ""
        return f"{self.rows_done:,}{total} rows stored{pct}{chunks}{speed}{eta}"


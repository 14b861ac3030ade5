"""Figures as a person reads them in status lines, alerts and the view."""
from __future__ import annotations


def ago(secs: float | None) -> str:
    """How long ago, in the unit that reads best ("-" when unknown)."""
    return "-" if secs is None else f"{duration(secs)} ago"


def duration(secs: float) -> str:
    """A length of time in the unit that reads best: 45s, 12m, 3h."""
    if secs < 120:
        return f"{secs:.0f}s"
    return f"{secs / 60:.0f}m" if secs < 7200 else f"{secs / 3600:.0f}h"

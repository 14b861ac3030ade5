"""Figures as a person reads them in status lines, alerts and the view."""
from __future__ import annotations


def ago(secs: float | None) -> str:
    """How long ago, in the unit that reads best ("-" when unknown)."""
    if secs is None:
        return "-"
    if secs < 120:
        return f"{secs:.0f}s ago"
    return f"{secs / 60:.0f}m ago" if secs < 7200 else f"{secs / 3600:.0f}h ago"

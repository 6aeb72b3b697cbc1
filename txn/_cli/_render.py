"""Plain-text tables for the command line and the demo."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from timeline import Instant


def render(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Align ``rows`` under ``headers`` in columns separated by two spaces."""
    cells = [[str(h) for h in headers]] + [["" if v is None else str(v) for v in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def render_timeline(instants: Iterable[Instant]) -> str:
    return render(("instant", "action", "state", "completed_at"),
                  ((i.time, i.action, i.state, i.completed_at) for i in instants))

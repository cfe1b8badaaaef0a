"""Tables that fit the terminal: a rich table where it fits, else the same rows stacked.

Used by every command that prints a wide table (``compare``, ``runs list``): on a narrow
terminal, a pipe or a CI log of 80 columns, a table of ten numeric columns squeezes each
cell to an ellipsis (``│ 9.… │``); stacked, each row is its first cell on a line of its own
and ``heading value`` pairs under it, wrapped at the width, nothing cut. Imports rich only.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from dlprof_lite.safe_text import printable


def print_fitting(console: Console, table: Table, title: str | None = None) -> None:
    """``table`` as it is when its natural width fits ``console``, else stacked."""
    if title is not None:
        console.print(Text(printable(title), style="bold"))
    natural = console.measure(table, options=console.options.update(width=10_000)).maximum
    if natural <= console.width:
        console.print(table)
        return
    for line in stacked_lines(table, console.width):
        console.print(Text(line))


def stacked_lines(table: Table, width: int) -> list[str]:
    """Each row as its first cell, then ``heading value`` pairs joined by `` · `` and
    wrapped at ``width`` (indented by two)."""
    headings = [_plain(column.header) for column in table.columns]
    # Table keeps each column's cells in order; a row is the i-th cell of every column.
    cells = [[_plain(cell) for cell in column._cells] for column in table.columns]
    if cells:
        cells[0] = distinct_short(cells[0], width)  # a kernel's name: its tail kept
    lines: list[str] = []
    for row in zip(*cells, strict=True):
        lines.append(row[0])
        pairs = [f"{h} {v}" for h, v in zip(headings[1:], row[1:], strict=True) if v]
        current = " "
        for pair in pairs:
            piece = (" · " if current.strip() else " ") + pair
            if len(current) + len(piece) > width and current.strip():
                lines.append(current)
                current = "  " + pair
            else:
                current += piece
        if current.strip():
            lines.append(current)
    return lines


def distinct_short(names: Sequence[str], width: int) -> list[str]:
    """Each name cut to ``width`` characters so that distinct names stay distinct: the
    distinguishing tail kept, the shared middle elided (``dummy_n…Conv2d(2)``); where two
    cut names would still read the same, the tail alone (``…work/Conv2d(2)``)."""
    width = max(width, 8)

    def cut(name: str, head: int) -> str:
        if len(name) <= width:
            return name
        return name[:head] + "…" + name[len(name) - (width - head - 1):]

    out = [cut(n, min(width // 3, 12)) for n in names]
    seen: dict[str, set[str]] = {}
    for full, short in zip(names, out, strict=True):
        seen.setdefault(short, set()).add(full)
    return [cut(full, 0) if len(seen[short]) > 1 else short
            for full, short in zip(names, out, strict=True)]  # fmt: skip


def _plain(cell: object) -> str:
    return cell.plain if isinstance(cell, Text) else printable(str(cell))

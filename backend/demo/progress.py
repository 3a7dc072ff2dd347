"""Progress of the demo's long steps: one text bar per step on stderr, with or without a terminal.

On a terminal the bar is redrawn in place (tqdm); in a log, a pipe or `docker logs` each update
is a line of its own, at most one every LOG_INTERVAL_S, so a long step is never silent. Every
step of `ett demo` that can take more than a couple of seconds reports through `bar` or `track`.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator
from typing import IO, TypeVar

from tqdm import tqdm

T = TypeVar("T")

# Without a terminal: one line per this many seconds (and the step's last line).
LOG_INTERVAL_S = 5.0
LOG_WIDTH = 88
_BAR = re.compile(r"\|[^|]*\|")


class _Lines:
    """A file for tqdm that turns each in-place redraw into one line (no carriage returns)."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.last = ""

    def write(self, s: str) -> int:
        text = s.replace("\r", "").strip()
        # The percentage and count, without the bar, times and rate: the closing redraw of a
        # line already written differs only in those (the bar's width follows the rate's).
        shown = _BAR.sub("|", text.split(" [", 1)[0])
        if text and shown != self.last:
            self.out.write(text + "\n")
            self.last = shown
        return len(s)

    def flush(self) -> None:
        self.out.flush()


def _is_terminal(out: IO[str]) -> bool:
    try:
        return bool(out.isatty())
    except (AttributeError, ValueError):
        return False


def bar(
    total: int | None,
    desc: str,
    unit: str = "it",
    *,
    enabled: bool = True,
    file: IO[str] | None = None,
) -> tqdm:
    """A progress bar for one step on stderr (or `file`); use it as a context manager."""
    out = sys.stderr if file is None else file
    if _is_terminal(out):
        return tqdm(
            total=total, desc=desc, unit=unit, disable=not enabled, file=out, dynamic_ncols=True
        )
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        disable=not enabled,
        file=_Lines(out),
        ncols=LOG_WIDTH,
        ascii=True,
        mininterval=LOG_INTERVAL_S,
    )


def track(
    items: Iterable[T],
    desc: str,
    unit: str = "it",
    *,
    total: int | None = None,
    enabled: bool = True,
    file: IO[str] | None = None,
) -> Iterator[T]:
    """Yield the items, advancing a bar by one after each (total: len(items) when it has one)."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with bar(total, desc, unit, enabled=enabled, file=file) as b:
        for item in items:
            yield item
            b.update(1)

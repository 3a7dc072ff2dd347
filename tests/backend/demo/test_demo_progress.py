"""Every long step of the demo load shows a text bar on stderr, on a terminal or in a log."""

from __future__ import annotations

import io

from backend.demo import progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_without_a_terminal_each_update_is_a_line_of_its_own() -> None:
    out = io.StringIO()
    seen = list(progress.track(["a", "b", "c"], "SLO history", "instant", file=out))
    assert seen == ["a", "b", "c"]
    text = out.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert lines[0].startswith("SLO history:   0%") and "0/3" in lines[0]
    assert lines[-1].startswith("SLO history: 100%") and "3/3" in lines[-1]
    counts = [line.split("|")[0] + line.split("|")[-1].split(" [")[0] for line in lines]
    assert len(counts) == len(set(counts))  # the closing redraw is not repeated
    assert all(len(line) <= progress.LOG_WIDTH for line in lines)


def test_on_a_terminal_the_bar_is_redrawn_in_place() -> None:
    out = _Terminal()
    with progress.bar(4, "ingest", "ev", file=out) as bar:
        bar.update(4)
    assert "\r" in out.getvalue() and "4/4" in out.getvalue()


def test_a_disabled_bar_writes_nothing_and_track_still_yields() -> None:
    out = io.StringIO()
    assert list(progress.track(range(3), "x", enabled=False, file=out)) == [0, 1, 2]
    assert out.getvalue() == ""


def test_the_closing_redraw_of_a_slow_step_is_not_a_second_line() -> None:
    out = io.StringIO()
    with progress.bar(2, "ETT%", "job", file=out) as b:
        b.update(2)
        b.refresh()  # written at 100%
        b.start_t -= 1.0  # the close redraws with another elapsed time and rate
    assert [line.split(":", 1)[0] for line in out.getvalue().splitlines()] == ["ETT%", "ETT%"]
    assert out.getvalue().count("2/2") == 1

"""The one progress line of long CLI work: redrawn on a terminal, silent in a pipe (or sparse, for a log)."""

from __future__ import annotations

import io

from amsg_local.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_sees_the_line_redrawn_then_erased() -> None:
    screen = Terminal()
    line = Progress(screen, interval_s=0.0)
    line.update("1 of 3")
    line.update("2 of 3")
    line.done()
    assert screen.getvalue() == "\r1 of 3\x1b[K\r2 of 3\x1b[K\r\x1b[K"


def test_a_terminal_keeps_the_final_line_when_given_one() -> None:
    screen = Terminal()
    line = Progress(screen, interval_s=0.0)
    line.update("working")
    line.done("3 done")
    assert screen.getvalue().endswith("\r3 done\x1b[K\n")


def test_redraws_are_rate_limited() -> None:
    screen = Terminal()
    line = Progress(screen, interval_s=60.0)
    for n in range(100):
        line.update(f"{n}")
    assert screen.getvalue() == "\r0\x1b[K"


def test_a_pipe_sees_nothing() -> None:
    pipe = io.StringIO()
    line = Progress(pipe)
    for n in range(5000):
        line.update(f"{n} rows", n)
    line.done("5000 rows")
    line.done()
    assert pipe.getvalue() == ""


def test_a_log_sees_every_nth_count_and_the_end() -> None:
    pipe = io.StringIO()
    line = Progress(pipe, every=2000)
    for n in range(1, 4001):
        line.update(f"{n} rows", n)
    line.done("4000 rows, done")
    assert pipe.getvalue() == "2000 rows\n4000 rows\n4000 rows, done\n"


def test_the_import_progress_is_this_line() -> None:
    """``amsg import`` keeps its per-kind counts on the shared line (a log gets them every 2,000 rows)."""
    from amsg_import.command import KindStats
    from amsg_import.command import Progress as ImportProgress

    pipe = io.StringIO()
    bar = ImportProgress(pipe, every=2)
    stats = KindStats()
    stats.read = 2
    bar.update("tasks", stats, "written")
    bar.done("tasks", stats, "written")
    assert pipe.getvalue().count("tasks") == 2 and "2 read" in pipe.getvalue()

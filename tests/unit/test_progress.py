from __future__ import annotations

import io
import re
import threading
from pathlib import Path

from dockerarch.build import JobResult
from dockerarch.cli.build import summary
from dockerarch.progress import Board
from dockerarch.terminal import printable


def _plain() -> tuple[Board, io.StringIO]:
    stream = io.StringIO()
    return Board(["debian-armv7", "debian-aarch64"], stream=stream, live=False), stream


def test_without_a_terminal_each_step_is_printed_once_per_target() -> None:
    board, stream = _plain()
    with board:
        for _ in range(3):  # buildx repeats a step's title for every line it prints
            board.step("debian-armv7", "apt: 8 packages")
            board.step("debian-aarch64", "apt: 8 packages")
        board.step("debian-armv7", "compiling zstandard with uv")
        board.say("debian-armv7", "verified zstandard-0.23.0-cp311-cp311-linux_armv7l.whl")
        board.end("debian-armv7", "done: 1 artifact verified")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 5, lines
    # Aligned: every target name padded to the longest, then m:ss, then the words.
    assert re.fullmatch(r"  debian-armv7 {3} ?\d+:\d\d  apt: 8 packages", lines[0])
    assert [line.split(maxsplit=2)[2] for line in lines] == [
        "apt: 8 packages",
        "apt: 8 packages",
        "compiling zstandard with uv",
        "verified zstandard-0.23.0-cp311-cp311-linux_armv7l.whl",
        "done: 1 artifact verified",
    ]


def test_what_a_build_wrote_is_shown_literally_not_as_terminal_controls() -> None:
    # A smoke test's last line, the names in a build's logs, a compile's file names: the
    # package's own build wrote them. Tab and newline stay; every other control is \\xNN.
    hostile = "ok\x1b]0;owned\x07\x1b[1A\x1b[2K\rgone\x9b end"
    shown = "ok\\x1b]0;owned\\x07\\x1b[1A\\x1b[2K\\x0dgone\\x9b end"
    assert printable("a\tb\nc\x00\x7f") == "a\tb\nc\\x00\\x7f"
    for live in (False, True):
        stream = io.StringIO()
        with Board(["debian-armv7"], stream=stream, live=live) as board:
            board.say("debian-armv7", f"smoke test passed: {hostile}")
            board.step("debian-armv7", f"compiling {hostile}")
            board.count("debian-armv7", "compiling", 1, 2, hostile)
            board.end("debian-armv7", "done")
        text = stream.getvalue()
        assert f"smoke test passed: {shown}" in text, (live, text)
        assert "\x07" not in text and "\x9b" not in text and "\r" not in text
        if not live:  # (rich draws its live lines with escape sequences of its own)
            assert "\x1b" not in text and f"compiling {shown}" in text, text
            assert f"compiling [{shown}]" in text, text


def test_stages_of_one_target_running_side_by_side_are_each_said_once() -> None:
    # BuildKit runs independent stages at once and interleaves their lines (seen in make demo:
    # "runtime packages" and "native toolchain" alternating, 17 lines for 2 steps).
    board, stream = _plain()
    for _ in range(4):
        board.step("debian-armv7", "runtime packages: apt: 2 packages")
        board.step("debian-armv7", "native toolchain: apt: 8 packages")
    board.step("debian-armv7", "compiling zstandard with uv")
    assert [line.split(maxsplit=2)[2] for line in stream.getvalue().splitlines()] == [
        "runtime packages: apt: 2 packages",
        "native toolchain: apt: 8 packages",
        "compiling zstandard with uv",
    ]


def test_concurrent_jobs_never_interleave_within_a_line() -> None:
    board, stream = _plain()

    def chatter(name: str) -> None:
        for i in range(200):
            board.step(name, f"step {i} of {name}")

    threads = [threading.Thread(target=chatter, args=(n,)) for n in board.names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 400
    assert all(re.fullmatch(r"  (\S+) +\d+:\d\d  step \d+ of \1", line) for line in lines)


def test_on_a_terminal_the_last_state_of_every_target_stays_after_the_live_lines() -> None:
    stream = io.StringIO()
    with Board(["a", "b"], stream=stream, live=True) as board:
        board.say("a", "building on local (hybrid)")
        board.step("a", "compiling zstandard with uv")
        board.end("a", "done: 1 artifact verified")
        board.end("b", "failed (exit code 6)")
    text = stream.getvalue()
    assert "building on local (hybrid)" in text
    tail = text.splitlines()[-2:]
    assert tail[0].split(maxsplit=2)[2] == "done: 1 artifact verified"
    assert tail[1].split(maxsplit=2)[2] == "failed (exit code 6)"


def test_the_summary_table_has_a_row_per_target_with_its_compiler_runs(tmp_path: Path) -> None:
    good = JobResult(
        target="debian-armv7",
        artifacts=[tmp_path / "zstandard-0.23.0-cp311-cp311-linux_armv7l.whl"],
        seconds=184.4,
        hybrid={
            "runs": 12,
            "compiles": 10,
            "native": 12,
            "emulated": 0,
            "ccache_hits": 7,
            "ccache_remote_hits": 5,
            "ccache_misses": 3,
            "ccache_sent": 6,
        },
    )
    plain = JobResult(target="debian-aarch64", artifacts=[tmp_path / "x.whl"], seconds=61)
    table = summary([good, plain]).splitlines()
    assert table[0].split() == ["target", "seconds", "compiler", "runs", "compiles", "artifacts"]
    assert table[1].split() == [
        "debian-armv7", "184", "12", "native,", "0", "emulated", "2", "local", "hits,", "5",
        "remote", "hits,", "3", "compiled,", "6", "sent", "zstandard-0.23.0-cp311-cp311-linux_armv7l.whl",
    ]  # fmt: skip
    assert table[2].split() == ["debian-aarch64", "61", "-", "-", "x.whl"]


def test_without_a_terminal_a_long_compile_says_each_tenth_of_the_way_once() -> None:
    board, stream = _plain()
    with board:
        for done in range(1, 1218):
            board.count("debian-armv7", "compiling torch with setup.py", done, 1217, f"{done}/1217")
        board.count("debian-armv7", "compiling torch with setup.py", 1217, 1217, "1217/1217")
    lines = [line.split(maxsplit=2)[2] for line in stream.getvalue().splitlines()]
    assert lines[0] == "compiling torch with setup.py [1/1217]"
    assert lines[-1] == "compiling torch with setup.py [1217/1217]"
    assert len(lines) == 11, lines  # 0%, 10%, ... 100%
    assert "compiling torch with setup.py [122/1217]" in lines  # the first count past 10%


def test_on_a_terminal_a_long_compile_shows_every_count_on_its_line() -> None:
    stream = io.StringIO()
    board = Board(["debian-armv7"], stream=stream, live=True)
    with board:
        board.count("debian-armv7", "compiling opencv with uv", 412, 1217, "412/1217")
        assert "compiling opencv with uv [412/1217]" in board._line(
            "debian-armv7", board._steps["debian-armv7"]
        )
        board.count("debian-armv7", "compiling opencv with uv", 413, 1217, "413/1217")
        assert board._steps["debian-armv7"] == "compiling opencv with uv [413/1217]"


def test_without_a_terminal_a_second_count_in_the_same_step_is_shown_from_its_start() -> None:
    # torch's setup.py runs a bundled project's own ninja ([1/4] ...) before the main one
    board, stream = _plain()
    with board:
        for done in range(1, 5):
            board.count("debian-armv7", "compiling torch with setup.py", done, 4, f"{done}/4")
        for done in range(1, 1327):
            board.count("debian-armv7", "compiling torch with setup.py", done, 1326, f"{done}/1326")
    lines = [line.split(maxsplit=2)[2] for line in stream.getvalue().splitlines()]
    assert "compiling torch with setup.py [4/4]" in lines
    assert "compiling torch with setup.py [1/1326]" in lines
    assert "compiling torch with setup.py [133/1326]" in lines  # its first tenth
    assert len([line for line in lines if line.endswith("/1326]")]) == 11


def test_a_job_that_fails_before_it_starts_shows_no_negative_time() -> None:
    board, stream = _plain()
    with board:
        board.end("debian-armv7", "failed")  # refused before its first step
    line = next(x for x in stream.getvalue().splitlines() if x.split()[0] == "debian-armv7")
    assert line.split()[1] == "0:00" and "-" not in line.split()[1], line
    assert board._elapsed("debian-armv7") >= 0


def test_without_a_terminal_a_compile_with_no_total_says_its_count_at_growing_steps() -> None:
    board, stream = _plain()
    with board:
        for done in range(1, 1301):
            board.count(
                "debian-armv7", "compiling qpulib with make", done, 0, f"{done} files compiled"
            )
    lines = [line.split(maxsplit=2)[2] for line in stream.getvalue().splitlines()]
    said = [int(line.split("[")[1].split()[0]) for line in lines]
    assert said == [1, 10, 25, 50, 100, 250, 500, 1000]
    assert lines[-1] == "compiling qpulib with make [1000 files compiled]"

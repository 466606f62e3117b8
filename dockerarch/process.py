"""The one way dockerarch runs an external program.

Every call shows ``+ cmd`` on stderr when ``--debug`` is on, fails with a clear error when the
program is missing, and never puts a secret in argv: secrets travel on stdin (``input=``).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dockerarch.errors import CommandFailedError, ToolMissingError

_debug = False
_interrupted = threading.Event()  # set once Ctrl-C is being handled: stops read it as such


def set_debug(enabled: bool) -> None:
    global _debug
    _debug = enabled


def debug_enabled() -> bool:
    return _debug


@dataclass(frozen=True, kw_only=True)
class Completed:
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


def which(program: str, *, hint: str) -> str:
    """The absolute path of ``program``, or a ToolMissingError saying how to get it."""
    found = shutil.which(program)
    if found is None:
        raise ToolMissingError(f"'{program}' is not installed or not on PATH", fix=hint)
    return found


def _prepare(
    args: Sequence[str], env: Mapping[str, str] | None, hint: str
) -> tuple[list[str], dict[str, str] | None]:
    """The argv with the program's absolute path (or a ToolMissingError), shown as ``+ cmd``
    with --debug, and the environment with ``env`` added."""
    argv = [which(args[0], hint=hint), *args[1:]]
    if _debug:
        print("+ " + shlex.join(args), file=sys.stderr, flush=True)
    return argv, None if env is None else {**os.environ, **env}


def run(
    args: Sequence[str],
    *,
    check: bool = True,
    timeout: float | None = None,
    input: str | None = None,
    env: Mapping[str, str] | None = None,
    hint: str = "Install it, or run scripts/setup-host, which installs everything dockerarch needs.",
) -> Completed:
    """Run ``args`` and capture its output as text.

    With ``check`` a non-zero exit raises CommandFailedError carrying the output's tail.
    """
    argv, full_env = _prepare(args, env, hint)
    try:
        proc = subprocess.run(
            argv,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=full_env,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise CommandFailedError(
            f"'{shlex.join(args)}' did not finish within {timeout:g} seconds",
            fix="Check that what it talks to is up, then try again.",
        ) from exc
    done = Completed(
        args=tuple(args), returncode=proc.returncode, stdout=proc.stdout, stderr=proc.stderr
    )
    if check and proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise CommandFailedError(
            f"'{shlex.join(args)}' failed with exit code {proc.returncode}"
            + (": " + " / ".join(tail) if tail else ""),
            returncode=proc.returncode,
            output=proc.stdout + proc.stderr,
        )
    return done


def stream(
    args: Sequence[str],
    *,
    on_line: Callable[[str], None],
    env: Mapping[str, str] | None = None,
    keep: int = 200,
    new_session: bool = False,
    hint: str = "Install it, or run scripts/setup-host, which installs everything dockerarch needs.",
) -> Completed:
    """Run ``args``, handing each line of its output (stdout and stderr merged) to ``on_line``
    as it comes, for live progress. Raises CommandFailedError with the last lines on failure.
    If we are interrupted the child is killed, with its whole process group when it runs in a
    ``new_session`` (there a terminal's Ctrl-C reaches only us, and we clean up in order)."""
    argv, full_env = _prepare(args, env, hint)
    tail: deque[str] = deque(maxlen=keep)
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=full_env,
        errors="replace", bufsize=1, start_new_session=new_session,
    ) as child:  # fmt: skip
        try:
            assert child.stdout is not None
            for line in child.stdout:
                line = line.rstrip("\n")
                tail.append(line)
                on_line(line)
            child.wait()
        except BaseException:
            if new_session:
                os.killpg(child.pid, signal.SIGKILL)
            else:
                child.kill()
            child.wait()
            raise
    output = "\n".join(tail)
    if child.returncode != 0:
        last = [line for line in tail if line.strip()][-5:]
        raise CommandFailedError(
            f"'{shlex.join(args)}' failed with exit code {child.returncode}"
            + (": " + " / ".join(last) if last else ""),
            returncode=child.returncode,
            output=output,
        )
    return Completed(args=tuple(args), returncode=0, stdout=output, stderr="")


def spawn(
    args: Sequence[str],
    *,
    daemon: bool = False,
    preexec_fn: Callable[[], None] | None = None,
    hint: str = "Install it, or run scripts/setup-host, which installs everything dockerarch needs.",
) -> subprocess.Popen[bytes]:
    """Start ``args`` and return at once: a ``daemon`` (a server left running, in a session of
    its own, with no standard streams) or a child that shares ours (the caller waits for it)."""
    argv, _ = _prepare(args, None, hint)
    if daemon:
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
    return subprocess.Popen(argv, preexec_fn=preexec_fn)


def children_of(pid: int, proc: Path = Path("/proc")) -> list[int]:
    """The processes whose parent is ``pid``, read from /proc."""
    found = []
    for stat in proc.glob("[0-9]*/stat"):
        try:
            # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile, or not a process
        if len(fields) > 1 and fields[1] == str(pid):
            found.append(int(stat.parent.name))
    return sorted(found)


def interrupting() -> bool:
    """Whether Ctrl-C is being handled: a program that ends now was stopped, it did not fail."""
    return _interrupted.is_set()


def interrupt_children(
    say: Callable[[str], None] = lambda line: None, patience: float = 5.0, limit: float = 300.0
) -> list[int]:
    """SIGINT to every program dockerarch started that still runs, then wait until they end.

    Ctrl-C on a terminal reaches the whole process group, but a `kill -INT` of dockerarch alone
    (a CI timeout, a supervisor) would leave buildx building on: buildx cancels its build on
    SIGINT. dockerarch must not end before buildx has: BuildKit shares a step that is still
    running with any build that asks for the same step, so a run started at once would join
    the cancelled one and fail with it (or wait for it). After ``patience`` seconds ``say`` tells
    what is awaited; another Ctrl-C, or ``limit`` seconds, leaves them running. Returns the
    processes signalled."""
    _interrupted.set()
    children = children_of(os.getpid())
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGINT)
    started = time.monotonic()
    waiting = set(children)
    told = False
    try:
        while waiting and time.monotonic() - started < limit:
            for pid in list(waiting):
                try:  # WNOWAIT: its own Popen (another thread) still reaps it, and its status
                    ended = (
                        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
                    )
                except ChildProcessError:
                    ended = True  # reaped already
                if ended:
                    waiting.discard(pid)
            if waiting and not told and time.monotonic() - started >= patience:
                told = True
                say(f"waiting for {_names(waiting)} to stop (Ctrl-C again to leave it running)")
            time.sleep(0.1)
    except KeyboardInterrupt:
        pass  # asked to leave them
    if waiting:
        say(f"left running: {_names(waiting)}")
    return children


def _names(pids: set[int]) -> str:
    """Each process as 'docker (pid 12)', its name read from /proc."""
    names = []
    for pid in sorted(pids):
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            comm = "a program"
        names.append(f"{comm} (pid {pid})")
    return ", ".join(names)

"""What a buildx step of a generated Dockerfile does, in words a person reads at a glance.

buildx names a step by its stage and whole command (``[build 6/7] RUN --mount=... uv build ...``);
the progress line says ``compiling zstandard with uv`` instead. The rules know the commands the
templates write; anything else falls back to the command's first words.
"""

from __future__ import annotations

import re
import shlex
import time
from collections import deque
from collections.abc import Callable

_TITLE = re.compile(r"^\[(?P<stage>[^\]]+?)(?:\s+\d+/\d+)?\]\s+(?P<command>.*)$", re.S)
_MOUNT = re.compile(r"--mount=\S+\s*")
_APT = re.compile(
    r"(?:apt-get install -y --no-install-recommends|apt-install \S+ \S+)\s+(?P<packages>.*?)(?:&&|;|$)",
    re.S,
)
_LISTS = re.compile(r"update-lists (?P<arch>\S+)")
_SDIST = re.compile(r"source=/sdists/(?P<dist>[^,\s/]+)")
_FETCH = re.compile(r"fetch-sdist '(?P<spec>[^']+)'")
_COLLECT = re.compile(r"collect-toolchain (?P<triplet>\S+) (?P<gcc>\d+)")
_NATIVE_WHEELS = re.compile(r"native-wheels \S+ (?P<dists>[^;&|]+)")
_CLONE = re.compile(r"git clone .*?(?P<url>(?:https?|file)://\S+)")
_DEBIAN_SOURCE = re.compile(r"apt-get \$o source --only-source (?P<package>\S+?);")
_TOOLS = (
    ("setup.py bdist_wheel", "setup.py"),
    ("pip wheel", "pip"),
    ("meson ", "meson"),
    ("cmake", "cmake"),
    ("make", "make"),
)


def describe(title: str, *, subject: str = "") -> str:
    """Words for a buildx step title; ``subject`` is what the build makes (recipe or package)."""
    if title.startswith("[internal]") or title.startswith("[context "):
        return "reading the build context"
    match = _TITLE.match(title.strip())
    if match is None:
        return _first_words(title)
    stage, command = match.group("stage"), match.group("command")
    words = _describe(stage, command, subject or "it")
    where = {
        "toolchain-tree": "native toolchain: ",
        "toolchain-wheels": "native toolchain: ",
        "toolchain-stage": "native toolchain: ",
        "native-python-stage": "native Python: ",
        "package-lists": "native apt: ",
    }.get(stage, "")
    return where + words


def _describe(stage: str, command: str, subject: str) -> str:
    verb, _, rest = command.partition(" ")
    if verb == "FROM":
        return "base image"
    if verb == "COPY":
        if "--from=toolchain-tree" in rest:
            return "taking the collected tree"
        if "--from=toolchain" in rest:
            return "grafting the native cross compiler"
        if "--from=sources" in rest:
            return "copying the natively fetched sources"
        if "--from=source" in rest:
            return "copying the --source tree"
        if "--from=build" in rest:
            return "collecting the artifacts"
        return "copying files"
    if verb in ("ENV", "WORKDIR", "ARG"):
        return "setting up"
    if verb != "RUN":
        return _first_words(command)
    body = _MOUNT.sub("", rest)
    if "DOCKERARCH_NEEDS" in body:
        return "runtime packages: the libraries the artifacts need"
    if "/tmp/hello.c" in body:  # the graft's one step: check, drivers, libraries' owners
        if "use-native-drivers" in body:
            return "checking the grafted compiler, the native build driver"
        return "checking the grafted compiler"
    if "dockerarch-sonames.tsv" in body:
        return "listing which package ships each shared library"
    apt = _APT.search(body)
    if apt:
        # apt's own options (-o NAME=VALUE, the native stages' dpkg options) are not packages
        count = len(re.sub(r"-o \S+", "", apt.group("packages")).split())
        where = "runtime packages: " if stage.startswith("runtime") else ""
        return f"{where}apt: {count} package{'s' if count != 1 else ''}"
    lists = _LISTS.search(body)
    if lists:
        return f"package lists for {lists.group('arch')}"
    if "--target /opt/dockerarch-uv" in body:
        return "installing uv"
    if "/opt/dockerarch-uv/bin/uv" in body:
        return "linking uv"
    collect = _COLLECT.search(body)
    if collect:
        return f"collecting gcc {collect.group('gcc')} for {collect.group('triplet')}"
    debian_source = _DEBIAN_SOURCE.search(body)
    if debian_source:
        return f"fetching Debian's source package {debian_source.group('package')}"
    fetch = _FETCH.search(body)
    if fetch:
        return f"fetching {fetch.group('spec')} from the index"
    if "/tmp/dockerarch-patches/" in body:
        return "applying the recipe's patches"
    wheels = _NATIVE_WHEELS.search(body)
    if wheels:
        return f"fetching the native {', '.join(wheels.group('dists').split())} wheels"
    if "native-needs" in body:
        return "shared libraries: read natively"
    if "dockerarch-cc --report" in body:
        return "counting compiler runs"
    if "from=artifacts" in rest:
        return "runtime image: installing the artifacts"
    builds = next((tool for needle, tool in _TOOLS[:2] if needle in body), None)
    if builds is None and ("tar -xzf" in body or "tar -xf" in body):
        return "unpacking the sources"
    clone = _CLONE.search(body)
    if clone:
        return f"cloning {clone.group('url')}"
    if "uv build" in body:
        sdist = _SDIST.search(rest)
        return (
            f"compiling {sdist.group('dist').removesuffix('-tree') if sdist else subject} with uv"
        )
    for needle, tool in _TOOLS:
        if needle in body:
            return f"compiling {subject} with {tool}"
    return _first_words(_strip_ca(body))


def _strip_ca(body: str) -> str:
    """Drops the preamble every fetching step starts with (macros.j2's use_ca: the CA bundle's
    and the indexes' secrets)."""
    return re.sub(r"^(?:if \[ -s /run/secrets/(?:ca-bundle|dockerarch-index) \].*?fi;\s*)+", "",
                  body.strip(), flags=re.S)  # fmt: skip


def _first_words(text: str, width: int = 60) -> str:
    try:
        words = shlex.split(text, posix=True)
    except ValueError:
        words = text.split()
    line = " ".join(words)
    return line if len(line) <= width else line[: width - 3] + "..."


# buildx's plain progress: a step's title ("#12 [build 4/5] RUN ..."), its error, and how far a
# compile step is: ninja's "[412/1217] Building CXX object ..." and the "[ 45%]" of cmake's
# Makefiles, as buildx shows them ("#19 12.34 [412/1217] ...").
_STEP = re.compile(r"^#(\d+) \[(?P<stage>[^\]]+)\] (?P<what>.+)$")
_ERROR = re.compile(r"^#(\d+) ERROR: (?P<what>.+)$")
_COUNT = re.compile(r"^#\d+ [\d.]+ \s*\[\s*(?:(?P<done>\d+)/(?P<total>\d+)|(?P<percent>\d+)%)\] ")
# A build that prints its compiler command lines instead (setuptools, plain Makefiles): each line
# that runs a C or C++ compiler on one source ("aarch64-linux-gnu-g++ ... -c x.cpp -o x.o") is
# one file compiled, counted with no total known.
_COMPILE = re.compile(
    r"^#\d+ [\d.]+ (?:\S*/)?(?:ccache )?(?:[\w.]+-linux-gnu\w*-)?(?:gcc|g\+\+|cc|c\+\+|clang|clang\+\+)"
    r"(?:-\d+)? .*\s-c\s"
)
TAIL_LINES = 30
# BuildKit stops passing on a step's output past its log limits (2 MiB, 100 KiB/s by default).
CLIPPED = re.compile(r"^#\d+ [\d.]+ \[output clipped, log limit .* reached\]")
CLIPPED_NOTE = (
    "the engine clipped this step's log (BuildKit's step log limit): its progress and any "
    "error it prints are lost from here; scripts/setup-host --stop, then scripts/setup-host, "
    "restarts dockerd without the limit"
)


class StepTracker:
    """Follows buildx's plain progress: the current step, and every step's lines.

    BuildKit replays the logs of a step another build already ran (cached toolchain steps show
    their apt output again in each invocation, with the first run's timestamps): a log line
    stamped later than the step could have reached is a replay, not work, and is not announced.
    """

    REPLAY_SLACK = 2.0  # seconds a log stamp may run ahead of our clock (buffering, rounding)

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.steps: dict[str, str] = {}  # "#12" -> "[build 4/5] RUN ..."
        self.lines: dict[str, deque[str]] = {}
        self.current = "starting"
        self.failed: tuple[str, str] | None = None  # (step title, error)
        self._clock = clock
        self._seen: dict[str, float] = {}  # when each step's title arrived
        self._compiled: dict[str, int] = {}  # compiler command lines seen, per step

    def feed(self, line: str) -> bool:
        """Take one line; True when a step starts doing work (cached steps stay quiet)."""
        number, _, rest = line.partition(" ")
        if number.startswith("#"):
            self.lines.setdefault(number, deque(maxlen=TAIL_LINES)).append(line)
        step = _STEP.match(line)
        if step:
            self.steps.setdefault(number, f"[{step.group('stage')}] {step.group('what')}")
            self._seen.setdefault(number, self._clock())
            return False
        error = _ERROR.match(line)
        if error and self.failed is None:
            self.failed = (self.steps.get(number, number), error.group("what"))
        working = number in self.steps and not rest.startswith(("CACHED", "DONE", "ERROR"))
        if working and self._replayed(number, rest):
            return False
        if working and self.steps[number] != self.current:
            self.current = self.steps[number]
            return True
        return False

    def count(self, line: str) -> tuple[int, int, str] | None:
        """How far the current step is, when ``line`` (of the current step) says: (done, total,
        as shown), from ninja's [N/M] or make's [ P%]; else, from a compiler's command line, the
        files compiled so far in the step (total 0: not known)."""
        number = line.partition(" ")[0]
        if self.steps.get(number) != self.current:
            return None
        found = _COUNT.match(line)
        if found is None:
            if not _COMPILE.match(line):
                return None
            done = self._compiled[number] = self._compiled.get(number, 0) + 1
            return done, 0, f"{done} file{'s' if done != 1 else ''} compiled"
        if found.group("percent") is not None:
            percent = int(found.group("percent"))
            return percent, 100, f"{percent}%"
        done, total = int(found.group("done")), int(found.group("total"))
        return (done, total, f"{done}/{total}") if 0 < total else None

    def _replayed(self, number: str, rest: str) -> bool:
        stamp, _, _ = rest.partition(" ")
        try:
            at = float(stamp)
        except ValueError:
            return False
        return at > self._clock() - self._seen[number] + self.REPLAY_SLACK

    def failure_report(self) -> tuple[str, list[str]]:
        if self.failed is None:
            return "the build", []
        title, _ = self.failed
        number = next((n for n, t in self.steps.items() if t == title), title)
        return title, list(self.lines.get(number, []))

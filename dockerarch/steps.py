"""What a buildx step of a generated Dockerfile does, in words a person reads at a glance.

buildx names a step by its stage and whole command (``[build 6/7] RUN --mount=... uv build ...``);
the progress line says ``compiling zstandard with uv`` instead. The rules know the commands the
templates write; anything else falls back to the command's first words.
"""

from __future__ import annotations

import re
import shlex

_TITLE = re.compile(r"^\[(?P<stage>[^\]]+?)(?:\s+\d+/\d+)?\]\s+(?P<command>.*)$", re.S)
_MOUNT = re.compile(r"--mount=\S+\s*")
_APT = re.compile(
    r"(?:apt-get install -y --no-install-recommends|apt-install \S+ \S+)\s+(?P<packages>.*?)(?:&&|;|$)",
    re.S,
)
_LISTS = re.compile(r"update-lists (?P<arch>\S+)")
_SDIST = re.compile(r"source=/sdists/(?P<dist>[^,\s]+)")
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
        "toolchain": "native toolchain: ",
        "native-python": "native Python: ",
        "package-lists": "native apt: ",
    }.get(stage, "")
    return where + words


def _describe(stage: str, command: str, subject: str) -> str:
    verb, _, rest = command.partition(" ")
    if verb == "FROM":
        return "base image"
    if verb == "COPY":
        if "--from=toolchain" in rest:
            return "grafting the native cross compiler"
        if "--from=sources" in rest:
            return "copying the natively fetched sources"
        if "--from=source" in rest:
            return "copying the --source tree"
        if "--from=build" in rest:
            return "collecting the artifacts"
        return "copying files"
    if verb in ("ENV", "WORKDIR"):
        return "setting up"
    if verb != "RUN":
        return _first_words(command)
    body = _MOUNT.sub("", rest)
    apt = _APT.search(body)
    if apt:
        count = len(apt.group("packages").split())
        where = "runtime packages: " if stage in ("runtime", "runtime-base") else ""
        return f"{where}apt: {count} package{'s' if count != 1 else ''}"
    lists = _LISTS.search(body)
    if lists:
        return f"package lists for {lists.group('arch')}"
    if "--target /opt/dockerarch-uv" in body:
        return "installing uv"
    collect = _COLLECT.search(body)
    if collect:
        return f"collecting gcc {collect.group('gcc')} for {collect.group('triplet')}"
    debian_source = _DEBIAN_SOURCE.search(body)
    if debian_source:
        return f"fetching Debian's source package {debian_source.group('package')}"
    fetch = _FETCH.search(body)
    if fetch:
        return f"fetching {fetch.group('spec')} from the index"
    if "/tmp/hello.c" in body:
        return "checking the grafted compiler"
    wheels = _NATIVE_WHEELS.search(body)
    if wheels:
        return f"fetching the native {', '.join(wheels.group('dists').split())} wheels"
    if "use-native-drivers" in body:
        return "putting the native build driver in place"
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
    """Drops the CA-bundle preamble every fetching step starts with."""
    return re.sub(r"^if \[ -s /run/secrets/ca-bundle \].*?fi;\s*", "", body.strip(), flags=re.S)


def _first_words(text: str, width: int = 60) -> str:
    try:
        words = shlex.split(text, posix=True)
    except ValueError:
        words = text.split()
    line = " ".join(words)
    return line if len(line) <= width else line[: width - 3] + "..."

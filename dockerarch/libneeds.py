"""What the artifacts need besides Python: every DT_NEEDED of every ELF file, resolved as the
target's loader resolves it in the runtime image where the artifacts are installed, so
RPATH/RUNPATH, $ORIGIN, the libraries an artifact carries and the base's own all count as they
will on the board. A hybrid build reads the image's files natively (pyelftools, following
glibc's search: data/toolchain/dockerarch_needs.py, the `needs` stage); other builds, and a
hybrid one whose files that reading cannot answer for, ask the target's own `ldd` (under QEMU). A soname nothing provides is looked up in the build stage's package database
(which package shipped it there: the build linked against it); piwheels does the same from its
wheels' ELF files to print each wheel's `apt install` line.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath

from packaging.utils import parse_wheel_filename

from dockerarch.artifacts import ArtifactReport, VerificationError

SONAMES_EXPORT = ".dockerarch-sonames.tsv"  # beside the artifacts: soname<TAB>package
_MARK = "dockerarch-needs:"
_WHEEL_MARK = "dockerarch-needs-wheel:"
_UNDECIDED = "dockerarch-needs-undecided:"  # the native reading's: it cannot answer
_END = "dockerarch-needs-end:"  # the native reading's last line: how many lines it printed
# buildx's plain progress: a step's title ("#VERTEX [STAGE I/N] RUN ..."), of the step that runs
# the native reading, and a line of a step's output ("#VERTEX SECONDS TEXT").
_CHECK_STEP = re.compile(r"^#(\d+) \[[^\]]+\] RUN .* sh /run/dockerarch/native-needs ")
_STEP_OUTPUT = re.compile(r"^#(\d+) \d+\.\d+ (dockerarch-needs[a-z-]*: ?.*)$")
# Debian policy 5.6.7: lower case letters, digits, +, - and .; two or more, alphanumeric first.
_PACKAGE_NAME = re.compile(r"[a-z0-9][a-z0-9+.-]+")

# Resolves wheel members to the files pip installed (importlib.metadata knows where).
_LOCATE = """
import importlib.metadata as m, json, sys
for dist, member in json.loads(sys.argv[1]):
    print(m.distribution(dist).locate_file(member))
"""


@dataclass(frozen=True)
class Missing:
    path: str  # the installed file
    soname: str
    elsewhere: str = ""  # a file of that name another installed wheel carries


def checked_files(reports: Iterable[ArtifactReport]) -> tuple[list[tuple[str, str]], list[str]]:
    """The ELF files the check covers: wheel members as (distribution, member), which the
    runtime image's Python locates where its installer put them, and the absolute paths of
    tarballs' and packages' files. A wheel's .data (scripts, headers) is left out: Python does
    not load it."""
    wheel_members: list[tuple[str, str]] = []
    paths: list[str] = []
    for report in reports:
        for member in report.elf_members:
            if report.kind == "wheel":
                if ".data/" in member.split("/", 1)[0] + "/":
                    continue
                wheel_members.append((str(parse_wheel_filename(report.name)[0]), member))
            else:
                paths.append(str(PurePosixPath("/") / member.removeprefix("./")))
    return wheel_members, paths


def native_files(reports: Iterable[ArtifactReport]) -> str | None:
    """files.json of the native reading (data/toolchain/dockerarch_needs.py, the `needs` stage
    of a hybrid build); None when there is no ELF file."""
    wheel_members, paths = checked_files(reports)
    if not wheel_members and not paths:
        return None
    return json.dumps({"wheels": wheel_members, "paths": paths}, indent=1) + "\n"


def report_in_log(lines: Iterable[str]) -> str | None:
    """The native reading's report as a build step printed it (the runtime stage of a hybrid
    build runs it after its packages), from buildx's plain progress; None when that step printed
    no whole one (it came from the cache, or its output was clipped). Only that step's lines
    count: another step's output (an install's) is not the report, whatever it says."""
    said: dict[str, list[str]] = {}
    for line in lines:
        if (title := _CHECK_STEP.match(line)) is not None:
            said.setdefault(title.group(1), [])
            continue
        found = _STEP_OUTPUT.match(line)
        if found is None or found.group(1) not in said:
            continue
        vertex, text = found.groups()
        if not text.startswith(_END):
            said.setdefault(vertex, []).append(text)
            continue
        count = text.removeprefix(_END).strip()
        report = said.pop(vertex)
        if count.isdigit() and int(count) == len(report):
            return "".join(f"{r}\n" for r in report)
    return None


def undecided(output: str) -> str | None:
    """Why the native reading could not answer (the target's ldd is asked instead), or None."""
    for line in output.splitlines():
        if line.startswith(_UNDECIDED):
            return line.removeprefix(_UNDECIDED).strip()
    return None


def check_command(reports: Iterable[ArtifactReport]) -> str | None:
    """A shell command for the runtime image that prints one ``dockerarch-needs: FILE SONAME``
    line per needed library the target's loader does not find; None when there is no ELF file."""
    wheel_members, paths = checked_files(reports)
    if not wheel_members and not paths:
        return None
    listing = " ".join(shlex.quote(p) for p in paths)
    if wheel_members:
        locate = shlex.quote(_LOCATE)
        listing += f" $(python3 -c {locate} {shlex.quote(json.dumps(wheel_members))})"
    # A soname the loader does not find may still be one another installed wheel carries (a
    # torch extension needs libc10.so, which `import torch` has loaded before it): found in
    # the Python package directories, it is not missing, and is said as such.
    # One emulated ldd (a bash script and the target's loader under QEMU) per file: numpy and
    # scipy carry over a hundred, so they run on every core; each line is one short write.
    each = (
        'f=$1; ldd "$f" 2>&1 | sed -n "s|^[[:space:]]*\\(.*\\) => not found.*|\\1|p" | '
        "while read -r so; do "
        'w=$(find /usr/local/lib/python3* /usr/lib/python3 -name "$so" 2>/dev/null | head -n 1); '
        f'if [ -n "$w" ]; then echo "{_WHEEL_MARK} $f $so $w"; '
        f'else echo "{_MARK} $f $so"; fi; '
        "done"
    )
    return (
        f'for f in {listing}; do printf "%s\\n" "$f"; done | '
        f'xargs -r -P "$(nproc)" -I FILE sh -c {shlex.quote(each)} sh FILE'
    )


def parse(output: str, reports: Iterable[ArtifactReport]) -> list[Missing]:
    """The needed libraries the loader did not find. One found in another installed wheel is not
    missing (Python loads it first); one the artifacts carry themselves is a broken RPATH (the
    import would fail on the board exactly so), a verification failure naming both."""
    carried = {PurePosixPath(m).name for r in reports for m in r.elf_members}
    found = []
    for line in output.splitlines():
        if line.startswith(_MARK):
            path, _, soname = line.removeprefix(_MARK).strip().rpartition(" ")
            found.append(Missing(path, soname))
        elif line.startswith(_WHEEL_MARK):
            path, soname, where = line.removeprefix(_WHEEL_MARK).strip().rsplit(" ", 2)
            beside = PurePosixPath(path).parent == PurePosixPath(where).parent
            if beside and PurePosixPath(path).parent.name.endswith(".libs"):
                # auditwheel's vendored libraries (a manylinux wheel's <name>.libs/): each is
                # loaded by the extension whose RPATH names that directory, with its siblings
                continue
            if soname in carried:
                raise VerificationError(
                    f"{path} needs {soname}, which the artifacts carry ({where}), but the "
                    "target's loader does not find it from there: its RPATH/RUNPATH does not "
                    "point at it, so the import fails on the board",
                    fix="Give the library that needs it an RPATH of $ORIGIN (or $ORIGIN/..., "
                    "to where the artifact puts the library): the recipe's link flags or its "
                    "build system's INSTALL_RPATH.",
                )
    return found


def packages_for(missing: list[Missing], sonames_tsv: str, target: str) -> list[str]:
    """The packages that ship the missing sonames in the build stage; a soname none ships is a
    verification failure naming the library and what needs it."""
    shipped: dict[str, str] = {}
    for line in sonames_tsv.splitlines():
        name, _, package = line.partition("\t")
        if name and package:
            shipped.setdefault(name, package)
    packages: list[str] = []
    unknown: list[Missing] = []
    for item in missing:
        if item.soname not in shipped:
            unknown.append(item)
            continue
        package = shipped[item.soname]
        if not _PACKAGE_NAME.fullmatch(package):
            # The table is the build stage's file, which the build's own code could write over:
            # what it names goes to the runtime image's apt, so only a package name is taken.
            raise VerificationError(
                f"the build stage's table of shared libraries names {package[:80]!r} as the "
                f"package that ships {item.soname} (needed by {item.path}): that is not a Debian "
                "package name, so nothing is installed for it",
                fix="Something in the build wrote over /dockerarch-sonames.tsv: see build.log "
                "for what the package's build ran, and build it again from a clean cache "
                "(--no-cache).",
            )
        if package not in packages:
            packages.append(package)
    if unknown:
        first = unknown[0]
        more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
        raise VerificationError(
            f"{first.path} needs {first.soname}{more}, which neither the artifacts carry nor "
            f"the {target} base has, and no package the build installed provides: it would "
            "fail to load on the board",
            fix="Carry the library in the artifact (as auditwheel repair does), link it "
            "statically, or add the package that provides it to the recipe's apt and "
            "runtime_apt.",
        )
    return sorted(packages)

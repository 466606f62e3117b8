"""The shared libraries installed artifacts need that the target's loader does not find, read
natively: the x86-64 Python of a hybrid build's native-python stage runs this in the emulated
runtime image (its files are the image's own), in place of one emulated `ldd` per ELF file.

It follows glibc's search for each DT_NEEDED of each file and of what that loads, breadth first
as ld.so loads them (elf/dl-load.c, _dl_map_object):

  - a name with a slash is a path; a name any object already loaded answers to (the name it was
    loaded as, its DT_SONAME) is that object, as is a file already loaded under another name;
  - DT_RPATH of the object that needs it and of each object that loaded it, in turn, unless the
    object that needs it has DT_RUNPATH (an object with DT_RUNPATH has no DT_RPATH at all);
  - LD_LIBRARY_PATH; DT_RUNPATH of the object that needs it (only its own);
  - /etc/ld.so.cache (unless DF_1_NODEFLIB), then the default directories (multiarch first);
  - $ORIGIN is the directory of the object as found; a candidate is taken only when it is an
    ELF file of the same class and machine (and ARM float ABI) as the file checked.

Output, one line each, as libneeds.check_command's emulated ldd pipeline prints them:
  dockerarch-needs: FILE SONAME                    nothing provides it
  dockerarch-needs-wheel: FILE SONAME WHERE        a file of that name in the Python package
                                                   directories (another wheel carries it)
  dockerarch-needs-undecided: REASON               this reading cannot answer ($PLATFORM or
                                                   $LIB in a path, a wheel not installed, ...):
                                                   dockerarch asks the target's ldd instead
  dockerarch-needs-end: N                          the last line: the report had N lines (read
                                                   from a build's log, the report is whole)

Usage: dockerarch_needs.py FILES_JSON  ({"wheels": [[dist, member], ...], "paths": [...]}).
Standard library and pyelftools (python3-pyelftools in the native-python stage) only.
"""

from __future__ import annotations

import glob
import json
import os
import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

ELF_MAGIC = b"\x7fELF"
EF_ARM_ABI_FLOAT_HARD = 0x400
DF_1_NODEFLIB = 0x800
CACHE_MAGIC = b"glibc-ld.so.cache1.1"
CACHE_HEADER = struct.Struct("<20sIIB3xI12x")  # magic+version, nlibs, len_strings, flags, ext
CACHE_ENTRY = struct.Struct("<iIIIQ")  # flags, key, value, osversion, hwcap
# the default directories of Debian's glibc, by machine (multiarch first)
TRIPLETS = {"EM_AARCH64": "aarch64-linux-gnu", "EM_X86_64": "x86_64-linux-gnu"}
SITE_GLOBS = ("/usr/local/lib/python3*/dist-packages", "/usr/lib/python3/dist-packages",
              "/usr/local/lib/python3*/site-packages", "/usr/lib/python3*/site-packages")  # fmt: skip
MARK, WHEEL_MARK, UNDECIDED, END = (
    "dockerarch-needs:",
    "dockerarch-needs-wheel:",
    "dockerarch-needs-undecided:",
    "dockerarch-needs-end:",  # the last line: how many lines the report has
)


class Undecided(Exception):
    """This reading cannot answer as the target's loader would."""


@dataclass(frozen=True)
class Kind:
    """What makes a candidate loadable beside the file checked."""

    machine: str
    elf_class: int
    hard_float: bool | None


@dataclass
class Obj:
    path: str  # as found (its directory is $ORIGIN)
    kind: Kind
    soname: str | None
    needed: list[str]
    rpath: list[str]  # expanded; empty when the object has DT_RUNPATH
    runpath: list[str] | None  # expanded; None when it has none
    nodeflib: bool
    loader: Obj | None = None
    names: set[str] = field(default_factory=set)
    identity: tuple[int, int] = (0, 0)


class Reader:
    """ELF files under ``root`` ("/" in the runtime image; a directory in the tests), read once."""

    def __init__(self, root: str = "/", environ: dict[str, str] | None = None) -> None:
        self.root = root
        found = (
            os.environ.get("LD_LIBRARY_PATH", "")
            if environ is None
            else environ.get("LD_LIBRARY_PATH", "")
        )
        self.library_path = [d for d in found.split(":") if d]
        self._kinds: dict[str, Kind | None] = {}
        self._cache: list[tuple[str, str]] | None = None

    def host(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/")) if self.root != "/" else path

    def kind(self, path: str) -> Kind | None:
        """The ELF class, machine and float ABI of ``path``; None when it is no readable ELF."""
        if path not in self._kinds:
            self._kinds[path] = None
            try:
                with open(self.host(path), "rb") as stream:
                    if stream.read(4) == ELF_MAGIC:
                        stream.seek(0)
                        self._kinds[path] = self._header(stream)[0]
            except (OSError, ValueError):
                pass
        return self._kinds[path]

    @staticmethod
    def _header(stream: BinaryIO) -> tuple[Kind, Any]:
        from elftools.common.exceptions import ELFError
        from elftools.elf.elffile import ELFFile

        try:
            elf = ELFFile(stream)
            machine = str(elf["e_machine"])
            hard = (
                bool(int(elf["e_flags"]) & EF_ARM_ABI_FLOAT_HARD) if machine == "EM_ARM" else None
            )
            return Kind(machine, elf.elfclass, hard), elf
        except (ELFError, KeyError, struct.error) as exc:
            raise ValueError(str(exc)) from exc

    def load(self, path: str, loader: Obj | None) -> Obj:
        """The object at ``path``: its dynamic section, $ORIGIN expanded."""
        host = self.host(path)
        with open(host, "rb") as stream:
            kind, elf = self._header(stream)
            tags = list(_dynamic_tags(elf))
        info = os.stat(host)
        strings: dict[str, list[str]] = {"DT_NEEDED": [], "DT_RPATH": [], "DT_RUNPATH": []}
        soname, flags_1 = None, 0
        for tag in tags:
            name = str(tag.entry.d_tag)
            if name == "DT_NEEDED":
                strings[name].append(tag.needed)
            elif name == "DT_RPATH":
                strings[name].append(tag.rpath)
            elif name == "DT_RUNPATH":
                strings[name].append(tag.runpath)
            elif name == "DT_SONAME":
                soname = tag.soname
            elif name == "DT_FLAGS_1":
                flags_1 = int(tag.entry.d_val)
        origin = os.path.dirname(path) or "."
        runpath = (
            [d for s in strings["DT_RUNPATH"] for d in _expand(s, origin)]
            if strings["DT_RUNPATH"]
            else None
        )
        rpath = (
            []
            if runpath is not None
            else [d for s in strings["DT_RPATH"] for d in _expand(s, origin)]
        )
        obj = Obj(path=path, kind=kind, soname=soname, needed=strings["DT_NEEDED"], rpath=rpath,
                  runpath=runpath, nodeflib=bool(flags_1 & DF_1_NODEFLIB), loader=loader,
                  identity=(info.st_dev, info.st_ino))  # fmt: skip
        obj.names = {path} | ({soname} if soname else set())
        return obj

    def cache(self) -> list[tuple[str, str]]:
        """/etc/ld.so.cache's (soname, path) entries in its order (new format, glibc 2.32+; the
        old format's compatibility part before it is skipped)."""
        if self._cache is None:
            self._cache = []
            try:
                with open(self.host("/etc/ld.so.cache"), "rb") as stream:
                    data = stream.read()
            except OSError:
                return self._cache
            start = data.find(CACHE_MAGIC)
            if start < 0:
                return self._cache
            _magic, count, _strings, _flags, _ext = CACHE_HEADER.unpack_from(data, start)
            for i in range(count):
                offset = start + CACHE_HEADER.size + i * CACHE_ENTRY.size
                _f, key, value, _os, _hwcap = CACHE_ENTRY.unpack_from(data, offset)
                self._cache.append((_c_string(data, start + key), _c_string(data, start + value)))
        return self._cache

    def default_dirs(self, kind: Kind) -> list[str]:
        if kind.machine == "EM_ARM":
            triplet = "arm-linux-gnueabihf" if kind.hard_float else "arm-linux-gnueabi"
        else:
            triplet = TRIPLETS.get(kind.machine, "")
        multiarch = [f"/lib/{triplet}", f"/usr/lib/{triplet}"] if triplet else []
        return [*multiarch, "/lib", "/usr/lib"]

    def candidate(self, path: str, kind: Kind) -> str | None:
        return path if self.kind(path) == kind else None

    def search(self, name: str, needer: Obj, kind: Kind) -> str | None:
        """Where the target's loader finds ``name``, needed by ``needer``; None: not found."""
        if "/" in name:
            path = name if name.startswith("/") else os.path.join("/", name)
            return self.candidate(path, kind)
        dirs: list[str] = []
        if needer.runpath is None:
            chain: Obj | None = needer
            while chain is not None:
                dirs += chain.rpath
                chain = chain.loader
        dirs += self.library_path
        dirs += needer.runpath or []
        for directory in dirs:
            found = self.candidate(os.path.join(directory, name), kind)
            if found:
                return found
        if needer.nodeflib:
            return None
        for soname, path in self.cache():
            if soname == name and self.candidate(path, kind):
                return path
        for directory in self.default_dirs(kind):
            found = self.candidate(os.path.join(directory, name), kind)
            if found:
                return found
        return None

    def not_found(self, path: str) -> list[str]:
        """Every name in ``path``'s load tree the loader does not find, in the order ld.so
        meets them (each once). A file that is not there or not an ELF file needs nothing, as
        ldd says of it ("not a dynamic executable")."""
        if self.kind(path) is None:
            return []
        top = self.load(path, None)
        loaded = [top]
        missing: list[str] = []
        for needer in loaded:  # grows as it goes: breadth first
            for name in needer.needed:
                if name in missing or any(name in obj.names for obj in loaded):
                    continue
                found = self.search(name, needer, top.kind)
                if found is None:
                    missing.append(name)
                    continue
                obj = self.load(found, needer)
                same = next((o for o in loaded if o.identity == obj.identity), None)
                if same is not None:
                    same.names.add(name)
                    continue
                obj.names.add(name)
                loaded.append(obj)
        return missing


def _dynamic_tags(elf: Any) -> list[Any]:
    """The dynamic section's entries, from PT_DYNAMIC (what ld.so reads), or from the .dynamic
    section when the segment's strings cannot be mapped."""
    from elftools.common.exceptions import ELFError

    for segment in elf.iter_segments():
        if segment["p_type"] == "PT_DYNAMIC":
            try:
                return list(segment.iter_tags())
            except (ELFError, KeyError, ValueError):
                break
    section = elf.get_section_by_name(".dynamic")
    return list(section.iter_tags()) if section is not None else []


def _c_string(data: bytes, offset: int) -> str:
    end = data.find(b"\0", offset)
    return data[offset : end if end >= 0 else len(data)].decode("utf-8", "surrogateescape")


def _expand(text: str, origin: str) -> Iterator[str]:
    for item in text.split(":"):
        if not item:
            continue
        expanded = item.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)
        if "$" in expanded:  # $LIB, $PLATFORM: the loader's own answers, not read here
            raise Undecided(f"{item} names a token other than $ORIGIN")
        yield os.path.normpath(expanded)


def locate(wheels: list[list[str]], root: str = "/") -> list[str]:
    """The installed paths of wheel members, from the installed dist-info (as
    importlib.metadata finds them in the target's Python package directories)."""
    import importlib.metadata
    import re

    dirs = [
        d
        for pattern in SITE_GLOBS
        for d in sorted(glob.glob(os.path.join(root, pattern.lstrip("/"))))
    ]
    by_name: dict[str, importlib.metadata.Distribution] = {}
    for dist in importlib.metadata.distributions(path=dirs):
        name = re.sub(r"[-_.]+", "-", str(dist.metadata["Name"] or "")).lower()
        by_name.setdefault(name, dist)
    paths = []
    for dist_name, member in wheels:
        wanted = re.sub(r"[-_.]+", "-", dist_name).lower()
        if wanted not in by_name:
            raise Undecided(f"{dist_name} is not installed in the Python package directories")
        located = str(by_name[wanted].locate_file(member))
        paths.append("/" + os.path.relpath(located, root) if root != "/" else located)
    return paths


def elsewhere(root: str = "/") -> dict[str, str]:
    """Every file name under the Python package directories, with its first path: a soname the
    loader does not find may be one another installed wheel carries."""
    found: dict[str, str] = {}
    tops = [
        *sorted(glob.glob(os.path.join(root, "usr/local/lib/python3*"))),
        os.path.join(root, "usr/lib/python3"),
    ]
    for top in tops:
        for directory, subdirs, files in os.walk(top):
            subdirs.sort()
            for name in sorted(files):
                path = os.path.join(directory, name)
                found.setdefault(name, "/" + os.path.relpath(path, root) if root != "/" else path)
    return found


def report(
    files: dict[str, Any], root: str = "/", environ: dict[str, str] | None = None
) -> list[str]:
    """The output lines for the files described by FILES_JSON."""
    try:
        paths = [*files.get("paths", []), *locate(files.get("wheels", []), root)]
        reader = Reader(root, environ)
        lines: list[str] = []
        carried: dict[str, str] | None = None
        for path in paths:
            for soname in reader.not_found(path):
                if carried is None:
                    carried = elsewhere(root)
                if soname in carried:
                    lines.append(f"{WHEEL_MARK} {path} {soname} {carried[soname]}")
                else:
                    lines.append(f"{MARK} {path} {soname}")
        return lines
    except Undecided as exc:
        return [f"{UNDECIDED} {exc}"]
    except (OSError, ValueError) as exc:
        return [f"{UNDECIDED} {type(exc).__name__}: {exc}"]


def main(argv: list[str]) -> int:
    with open(argv[1], encoding="utf-8") as stream:
        files = json.load(stream)
    lines = report(files)
    for line in lines:
        print(line)
    print(f"{END} {len(lines)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""What the host's apt knows, asked once a run and remembered across runs while its lists are
the same: whether a suite has a package (a native driver, a cross compiler), and the suites'
codenames.
"""

from __future__ import annotations

import functools
import hashlib
import re
import shutil
import threading
from collections.abc import Iterable
from pathlib import Path


def madison_has(output: str, suite: str) -> bool:
    """Whether `apt-cache madison` output lists a version from ``suite`` (or its updates)."""
    for line in output.splitlines():
        fields = [f.strip() for f in line.split("|")]
        if len(fields) >= 3 and re.search(
            rf"\s{re.escape(suite)}(-updates|-security)?/", " " + fields[2]
        ):
            return True
    return False


def release_codenames(policy: str) -> dict[str, str]:
    """The suites `apt-cache policy` lists, each by its codename and by its archive name
    (`stable` -> `trixie`): {name: codename}."""
    names: dict[str, str] = {}
    for line in policy.splitlines():
        line = line.strip()
        if not line.startswith("release "):
            continue
        fields = dict(f.split("=", 1) for f in line[len("release ") :].split(",") if "=" in f)
        codename = fields.get("n")
        if codename:
            names[codename] = codename
            if fields.get("a"):
                names.setdefault(fields["a"], codename)
    return names


_HOST_APT: dict[tuple[str, str], bool] = {}  # (package, suite): the host's lists, once a run
_HOST_APT_LOCK = threading.Lock()
# What apt-cache reads: the package lists and the sources and pins. Their names, sizes and times
# key the answers kept on disk between runs (each apt-cache run reads the whole cache: 0.7 s).
HOST_APT_STATE = (Path("/var/lib/apt/lists"), Path("/etc/apt/sources.list"),
                  Path("/etc/apt/sources.list.d"), Path("/etc/apt/preferences"),
                  Path("/etc/apt/preferences.d"))  # fmt: skip
HOST_APT_MEMO = "host-apt.json"  # in base.STATE_DIR


def _host_apt_signature() -> str:
    digest = hashlib.sha256()
    for top in HOST_APT_STATE:
        try:
            entries = sorted(top.iterdir()) if top.is_dir() else [top]
        except OSError:
            continue
        for entry in entries:
            try:
                info = entry.stat()
            except OSError:
                continue
            if entry.is_file():
                digest.update(f"{entry}\0{info.st_size}\0{info.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _host_apt_memo_path() -> Path:
    from dockerarch import base

    return base.STATE_DIR / HOST_APT_MEMO


@functools.cache
def _host_apt_memo() -> dict[str, object]:
    """The answers of earlier runs, while the host's apt state is what they read; the file
    (re)started empty otherwise. Never an error: without it, apt-cache is asked again."""
    import json

    signature = _host_apt_signature()
    try:
        memo = json.loads(_host_apt_memo_path().read_text())
    except (OSError, ValueError):
        memo = None
    if not isinstance(memo, dict) or memo.get("signature") != signature:
        memo = {"signature": signature, "suites": None, "packages": {}}
    return memo


def _save_host_apt_memo() -> None:
    import json

    from dockerarch.files import write_atomic

    try:
        write_atomic(
            _host_apt_memo_path(), (json.dumps(_host_apt_memo(), indent=1) + "\n").encode()
        )
    except OSError:
        pass  # a state directory this user cannot write: the next run asks apt-cache again


def host_apt_has(package: str, suite: str) -> bool:
    """Whether the host's apt knows ``package`` in ``suite`` (a codename or an archive name such
    as `stable`): the toolchain stage's base is bootstrapped from the host's mirror, so the host's
    package lists tell what it can install. Without apt-cache, or when the host has no lists of
    that suite, assume yes: the toolchain stage's apt then says what is missing."""
    return host_apt_has_all([package], suite)[package]


def host_apt_has_all(packages: Iterable[str], suite: str) -> dict[str, bool]:
    """host_apt_has for several packages with one `apt-cache madison` (each apt-cache run reads
    the whole cache: about 0.7 s), remembered for the rest of the process."""
    from dockerarch import process

    wanted = list(dict.fromkeys(packages))
    with _HOST_APT_LOCK:
        known = _host_apt_memo()["packages"]
        assert isinstance(known, dict)
        for p in wanted:
            if f"{suite}/{p}" in known:
                _HOST_APT.setdefault((p, suite), bool(known[f"{suite}/{p}"]))
        asked = [p for p in wanted if (p, suite) not in _HOST_APT]
        if asked:
            if shutil.which("apt-cache") is None:
                found = dict.fromkeys(asked, True)
            else:
                suites = _host_suites()
                if suite not in suites:
                    found = dict.fromkeys(asked, True)
                else:
                    output = process.run(["apt-cache", "madison", *asked], check=False, timeout=60)
                    by_package = madison_by_package(output.stdout)
                    found = {p: madison_has(by_package.get(p, ""), suites[suite]) for p in asked}
            _HOST_APT.update({(p, suite): v for p, v in found.items()})
            known.update({f"{suite}/{p}": v for p, v in found.items()})
            _save_host_apt_memo()
        return {p: _HOST_APT[p, suite] for p in wanted}


@functools.cache
def _host_suites() -> dict[str, str]:
    from dockerarch import process

    memo = _host_apt_memo()
    if not isinstance(memo.get("suites"), dict):
        policy = process.run(["apt-cache", "policy"], check=False, timeout=60).stdout
        memo["suites"] = release_codenames(policy)
        _save_host_apt_memo()
    suites = memo["suites"]
    assert isinstance(suites, dict)
    return {str(k): str(v) for k, v in suites.items()}


def madison_by_package(output: str) -> dict[str, str]:
    """`apt-cache madison P1 P2 ...` output split into each package's lines."""
    lines: dict[str, list[str]] = {}
    for line in output.splitlines():
        name = line.split("|", 1)[0].strip()
        if "|" in line and name:
            lines.setdefault(name, []).append(line)
    return {name: "\n".join(found) for name, found in lines.items()}

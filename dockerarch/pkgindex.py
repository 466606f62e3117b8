"""`dockerarch upload`: verified wheels into a Python package index per board target, for boards
that install with pip; or, for boards that reach no index, a static index tree.

The anchor is piwheels: one index per OS release (a linux_armv7l tag says nothing of glibc or
Python), static PEP 503 pages with sha256 fragments, pip's own hash checking. Every wheel passes
the board-ABI gate of its target's index at the door (machine, float ABI, tag, GLIBC/GLIBCXX,
Python version) and must still be the file the build verified (the sha256 in manifest.json).
An index never changes a published file: the same file again is a no-op, a different file under
a published name is refused before anything is uploaded. Uploads speak the upload API twine
speaks (through twine's own Repository), so any index works: devpi, pypiserver, Nexus, GitLab.
Credentials come from where twine users keep them (TWINE_USERNAME/TWINE_PASSWORD, ~/.pypirc,
keyring), or for the index scripts/setup-host runs, from its root-only file; never argv, output
or results. manifest.json records what was published where, with sha256.
"""

from __future__ import annotations

import configparser
import contextlib
import html
import io
import json
import os
import re
import shutil
import tempfile
import urllib.parse
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
from packaging.utils import canonicalize_name, parse_wheel_filename

from dockerarch import artifacts, simple_api
from dockerarch.artifacts import VerificationError
from dockerarch.config import IndexConfig, url_host
from dockerarch.errors import DockerarchError, OutputError, UsageError
from dockerarch.files import sha256_file, write_atomic
from dockerarch.publish import read_result, require_checked
from dockerarch.render import RenderRequest
from dockerarch.targets import BoardTarget

Say = Callable[[str], None]
SIMPLE_JSON = simple_api.SIMPLE_JSON
STATE_PYPIRC = "index/pypirc"  # below the state directory: scripts/setup-host's index


class PackageIndexError(DockerarchError):
    """The package index did not answer, refused, or holds something else under a name."""

    exit_code = 4


@dataclass(frozen=True, kw_only=True)
class Wheel:
    """One verified wheel of a build result, for one target."""

    target: BoardTarget
    path: Path
    sha256: str
    result: Path  # the build's result directory (its manifest.json)
    needs_apt: tuple[str, ...] = ()  # the target's packages its shared libraries need
    fetched: bool = False  # a wheel set's member fetched from an index (manylinux tags pass)

    @property
    def project(self) -> str:
        return str(canonicalize_name(parse_wheel_filename(self.path.name)[0]))

    @property
    def version(self) -> str:
        return str(parse_wheel_filename(self.path.name)[1])


@dataclass(frozen=True)
class Credentials:
    username: str | None
    password: str | None
    source: str  # where they came from, for messages (never the secret)

    def __repr__(self) -> str:  # never the password, not even in a traceback
        return f"Credentials(username={self.username!r}, source={self.source!r})"


# --- what was built ----------------------------------------------------------------------------


def find_wheels(requests_: list[RenderRequest], out: Path) -> list[Wheel]:
    """Each request's verified wheels in ``out``, still the files the build verified."""
    wheels = []
    for request in requests_:
        target = request.target
        directory, manifest, rebuild = read_result(request, out)
        found = [a for a in manifest.get("artifacts", []) if a.get("kind") == "wheel"]
        if found:
            require_checked(directory, manifest, rebuild)
        if not found:
            kinds = sorted({str(a.get("kind")) for a in manifest.get("artifacts", [])})
            raise UsageError(
                f"The build of {request.result_name} for {target.name} made no wheel "
                f"({', '.join(kinds) or 'nothing'}): a package index serves wheels only",
                fix="Publish its runtime image instead: dockerarch push "
                f"{request.recipe.name} --target {target.name}.",
            )
        for artifact in found:
            path = directory / str(artifact["name"])
            if not path.is_file():
                raise UsageError(f"{path}, which {directory / 'manifest.json'} records, is gone",
                                 fix=f"Build it again: {rebuild}.")  # fmt: skip
            digest = sha256_file(path)
            if digest != artifact.get("sha256"):
                raise VerificationError(
                    f"{path} is not the file the build verified (sha256 {digest[:16]}..., "
                    f"manifest.json says {str(artifact.get('sha256'))[:16]}...)",
                    fix=f"What is published must be what was verified: build it again: {rebuild}.",
                )
            needs = tuple(str(p) for p in manifest.get("needs_apt") or ())
            wheels.append(Wheel(target=target, path=path, sha256=digest, result=directory,
                                needs_apt=needs))  # fmt: skip
    return wheels


def find_set_wheels(sets: list[tuple[BoardTarget, Path]]) -> list[Wheel]:
    """Every wheel of each target's set directory (build wheel -r), still the file the set's
    manifest.json records."""
    wheels = []
    for target, directory in sets:
        try:
            manifest = json.loads((directory / "manifest.json").read_text())
        except (OSError, ValueError) as exc:
            raise UsageError(
                f"No wheel set for {target.name} at {directory} ({type(exc).__name__})",
                fix="Build it first: dockerarch build wheel -r FILE (with the same --out and "
                "--name).",
            ) from exc
        needs = tuple(str(p) for p in manifest.get("needs_apt") or ())
        for entry in manifest.get("distributions", []):
            if not entry.get("runtime"):
                continue
            path = directory / str(entry["file"])
            digest = sha256_file(path) if path.is_file() else "missing"
            if digest != entry.get("sha256"):
                raise VerificationError(
                    f"{path} is not the file the set recorded ({digest[:16]}, manifest.json "
                    f"says {str(entry.get('sha256'))[:16]})",
                    fix="What is published must be what was checked: build the set again.",
                )
            wheels.append(Wheel(target=target, path=path, sha256=digest, result=directory,
                                needs_apt=needs, fetched=entry.get("how") == "fetched"))  # fmt: skip
    return wheels


def gate(wheel: Wheel) -> None:
    """The board-ABI gate of the target's index: machine, float ABI, tag, GLIBC/GLIBCXX (the
    build's own verification, again) and the target's Python version."""
    gate_file(wheel.path, wheel.target, fetched=wheel.fetched)


def gate_file(
    path: Path, target: BoardTarget, *, fetched: bool = False
) -> artifacts.ArtifactReport:
    """The board-ABI gate for a wheel file of ``target``, built by dockerarch or ``fetched`` from
    an index (a manylinux tag the target's glibc accepts is fine then): its report."""
    report = artifacts.verify(path, target, fetched=fetched)
    _, _, _, tags = parse_wheel_filename(path.name)
    major, minor = (int(p) for p in target.python.split("."))
    ok = False
    for tag in tags:
        if tag.interpreter in (f"cp{major}{minor}", f"py{major}", f"py{major}{minor}"):
            ok = True
        elif tag.abi == "abi3" and tag.interpreter.startswith("cp3"):
            ok = ok or int(tag.interpreter[3:] or 0) <= minor
    if not ok:
        interpreters = ", ".join(sorted({t.interpreter for t in tags}))
        raise VerificationError(
            f"{path.name} is for {interpreters}, but target '{target.name}' runs Python "
            f"{target.python}: pip on its boards would refuse it (or worse, a wheel for another "
            "OS release would slip into its index)",
            fix=f"Build it for that target (dockerarch build ... --target {target.name}), and "
            "publish each target's wheels to its own index.",
        )
    return report


# --- credentials -------------------------------------------------------------------------------


def _norm(url: str) -> str:
    return url.rstrip("/") + "/"


def _pypirc_match(path: Path, url: str) -> tuple[str, configparser.SectionProxy] | None:
    """The .pypirc section whose repository URL is the longest prefix of ``url``."""
    parser = configparser.RawConfigParser()
    try:
        if not parser.read(path):
            return None
    except (configparser.Error, UnicodeDecodeError) as exc:
        # The parser's message could quote a secret: name the file only.
        raise UsageError(f"{path} is not a valid .pypirc ({type(exc).__name__})",
                         fix="Fix its syntax; see the .pypirc specification.") from None  # fmt: skip
    best: tuple[str, configparser.SectionProxy] | None = None
    for name in parser.sections():
        repo = parser[name].get("repository")
        if repo and _norm(url).startswith(_norm(repo)):
            if best is None or len(_norm(repo)) > len(_norm(best[1]["repository"])):
                best = (name, parser[name])
    return best


def credentials(url: str, *, state_dir: Path, home: Path | None = None) -> Credentials:
    """Upload credentials for ``url``: TWINE_USERNAME/TWINE_PASSWORD, else the ~/.pypirc section
    whose repository is the longest prefix of the URL, else keyring (as twine asks it: the URL as
    the service), else scripts/setup-host's file for its own index, else none (an index that
    takes anonymous uploads)."""
    env_user, env_pass = os.environ.get("TWINE_USERNAME"), os.environ.get("TWINE_PASSWORD")
    if env_pass:
        return Credentials(env_user or "__token__", env_pass, "TWINE_USERNAME/TWINE_PASSWORD")
    pypirc = Path(os.environ.get("TWINE_CONFIG_FILE") or (home or Path.home()) / ".pypirc")
    match = _pypirc_match(pypirc, url) if pypirc.is_file() else None
    if match and match[1].get("password"):
        return Credentials(match[1].get("username", "__token__"), match[1]["password"],
                           f"{pypirc} [{match[0]}]")  # fmt: skip
    username = env_user or (match[1].get("username") if match else None)
    password = _keyring_password(url, username)
    if password:
        return Credentials(username or "__token__", password, "keyring")
    local = state_dir / STATE_PYPIRC
    try:
        found = _pypirc_match(local, url) if local.is_file() else None
    except PermissionError:
        found = None
    if found and found[1].get("password"):
        return Credentials(found[1].get("username"), found[1]["password"],
                           f"scripts/setup-host's index credentials ({local})")  # fmt: skip
    return Credentials(username, None, "none found")


def _keyring_password(url: str, username: str | None) -> str | None:
    try:
        import keyring
        from keyring.errors import KeyringError
    except ImportError:
        return None
    try:
        if username is None:
            credential = keyring.get_credential(url, None)
            return credential.password if credential else None
        return keyring.get_password(url, username)
    except (KeyringError, RuntimeError):
        return None


# --- the index over HTTP -----------------------------------------------------------------------


def parse_project_page(body: bytes, content_type: str, base_url: str) -> dict[str, dict[str, str]]:
    """A project's simple page (PEP 691 JSON or PEP 503 HTML): {file name: {url, sha256}}."""
    return {f.filename: {"url": f.url, "sha256": f.sha256}
            for f in simple_api.parse_project_page(body, content_type, base_url)}  # fmt: skip


class Index:
    """One target's index: where uploads go and where pip reads."""

    def __init__(self, config: IndexConfig, target: str, creds: Credentials) -> None:
        self.config = config
        self.target = target
        self.upload_url = config.upload_url(target)
        self.simple_url = config.simple_url(target)
        self.creds = creds
        self.session = requests.Session()
        self.session.trust_env = False  # the user's own index is reached directly, never by proxy
        self.verify: str | bool = str(config.ca) if config.ca else True

    def _get(self, url: str, **kwargs: Any) -> requests.Response:
        try:
            return self.session.get(url, timeout=30, verify=self.verify, **kwargs)
        except requests.RequestException as exc:
            raise PackageIndexError(
                f"The package index at {self.config.server} does not answer ({_reason(exc)}); "
                "nothing was uploaded",
                fix="Start it (scripts/setup-host runs one at 127.0.0.1:3141) or point "
                "registry.yaml's index.url at one that runs, then run the same command again.",
            ) from None

    def published(self, project: str) -> dict[str, dict[str, str]]:
        """The files the index lists for ``project``: {file name: {url, sha256}}."""
        url = f"{self.simple_url}{project}/"
        response = self._get(url, headers={"Accept": simple_api.ACCEPT})
        if response.status_code == 404:
            return {}
        if response.status_code != 200:
            raise PackageIndexError(
                f"The package index answered {response.status_code} {response.reason} for {url}",
                fix="Check registry.yaml's index.simple (where pip reads) and the index's log.",
            )
        return parse_project_page(response.content, response.headers.get("Content-Type", ""),
                                  response.url)  # fmt: skip

    def ensure(self, say: Say) -> None:
        """Make sure the target's index exists. devpi keeps indexes per user/name: one that is
        missing is created, non-volatile (a published file is never replaced), with no bases
        (pip on a board sees this target's wheels only), uploads by its owner only."""
        response = self._get(self.simple_url, headers={"Accept": "text/html"})
        if response.status_code != 404:
            return
        api = self._get(f"{self.config.server}/+api", headers={"Accept": "application/json"})
        path = urllib.parse.urlsplit(self.upload_url).path.strip("/").split("/")
        if api.status_code != 200 or "X-Devpi-Server-Version" not in api.headers or len(path) != 2:
            raise PackageIndexError(
                f"There is no index for target {self.target} at {self.simple_url} (404)",
                fix="Create it on the index server (one index per board target), or fix "
                "registry.yaml's index.url and index.simple.",
            )
        if self.creds.password is None:
            raise PackageIndexError(
                f"The index for target {self.target} does not exist yet, and creating it on "
                f"{self.config.server} needs credentials; {self.creds.source}",
                fix=_CREDENTIALS_FIX,
            )
        body = {"type": "stage", "bases": [], "volatile": False, "acl_upload": [path[0]],
                "title": f"dockerarch wheels for {self.target}"}  # fmt: skip
        try:
            made = self.session.put(
                f"{self.config.server}/{path[0]}/{path[1]}", json=body, timeout=30,
                verify=self.verify, auth=(self.creds.username or "", self.creds.password),
                headers={"Accept": "application/json"},
            )  # fmt: skip
        except requests.RequestException as exc:
            raise PackageIndexError(f"Creating the index for {self.target} failed: {_reason(exc)}",
                                    fix="Check the index server, then run again.") from None  # fmt: skip
        if made.status_code in (401, 403):
            raise PackageIndexError(
                f"{self.config.server} refused to create the index {path[0]}/{path[1]} for "
                f"{self.creds.username} ({made.status_code}; credentials from {self.creds.source})",
                fix=_CREDENTIALS_FIX,
            )
        if made.status_code not in (200, 201):
            raise PackageIndexError(
                f"{self.config.server} did not create the index {path[0]}/{path[1]}: "
                f"{made.status_code} {made.text[:200]}",
                fix="Check the index server's log.",
            )
        say(f"created index {path[0]}/{path[1]} for {self.target} (non-volatile, no bases)")

    def upload(self, wheel: Wheel) -> None:
        from twine.package import PackageFile
        from twine.repository import Repository

        repository = Repository(self.upload_url, self.creds.username, self.creds.password,
                                disable_progress_bar=True)  # fmt: skip
        repository.session.trust_env = False
        if self.config.ca:
            repository.set_certificate_authority(str(self.config.ca))
        try:
            package = PackageFile.from_filename(str(wheel.path), comment=None)
            if wheel.needs_apt:  # carried into the index: Requires-External (PEP 345)
                form = package.metadata_dictionary
                package.metadata_dictionary = lambda: {  # type: ignore[method-assign]
                    **form(), "requires_external": list(wheel.needs_apt),
                    "comment": f"on the board first: apt install {' '.join(wheel.needs_apt)}",
                }  # fmt: skip
            with contextlib.redirect_stdout(io.StringIO()):  # twine prints "Uploading ..."
                response = repository.upload(package)
        except requests.RequestException as exc:
            raise PackageIndexError(
                f"Uploading {wheel.path.name} to {self.upload_url} failed: {_reason(exc)}",
                fix="Check the index answers, then run the same command again: files already "
                "published are not sent twice.",
            ) from None
        finally:
            repository.close()
        if response.status_code in (401, 403):
            raise PackageIndexError(
                f"The index at {self.upload_url} refused the upload of {wheel.path.name}: "
                f"{response.status_code} {response.reason} (credentials: {self.creds.source})",
                fix=_CREDENTIALS_FIX,
            )
        if response.is_redirect or not 200 <= response.status_code < 300:
            raise PackageIndexError(
                f"The index at {self.upload_url} refused {wheel.path.name}: "
                f"{response.status_code} {response.reason} {response.text[:300].strip()}",
                fix="Check registry.yaml's index.url (the upload URL) and the index's log.",
            )


_CREDENTIALS_FIX = (
    "Give credentials where twine looks for them: a ~/.pypirc section whose repository is the "
    "index's URL (with username and password), keyring (keyring set URL USERNAME), or "
    "TWINE_USERNAME and TWINE_PASSWORD in the environment; never on the command line."
)


def _reason(exc: Exception) -> str:
    text = str(exc)
    match = re.search(r"\[Errno -?\d+\] [^')\]]+", text)
    if match:
        return match.group(0)
    return type(exc).__name__ if len(text) > 200 else text


# --- uploading ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    wheel: Wheel
    index: str  # the simple URL of the target's index
    url: str  # the file's URL as the index lists it
    uploaded: bool  # False: the index already held this very file


def upload(wheels: list[Wheel], config: IndexConfig, *, state_dir: Path,
           say: Say) -> list[Outcome]:  # fmt: skip
    """Publish each wheel to its target's index: every wheel passes the gate and every name is
    checked against the index before the first upload; each upload is read back by sha256;
    each result's manifest.json then records what was published where."""
    for wheel in wheels:
        gate(wheel)
    indexes: dict[str, Index] = {}
    plan: list[tuple[Wheel, Index, dict[str, str] | None]] = []
    for wheel in wheels:
        index = indexes.get(wheel.target.name)
        if index is None:
            creds = credentials(config.upload_url(wheel.target.name), state_dir=state_dir)
            index = indexes[wheel.target.name] = Index(config, wheel.target.name, creds)
        there = index.published(wheel.project).get(wheel.path.name)
        if there and there["sha256"] and there["sha256"] != wheel.sha256:
            raise PackageIndexError(
                f"The index for {wheel.target.name} already has {wheel.path.name} with other "
                f"contents (sha256 {there['sha256'][:16]}..., this build's {wheel.sha256[:16]}...); "
                "an index never changes a published file, and nothing was uploaded",
                fix="Publish a new version (or a build tag, as piwheels does), or remove the file "
                "from the index by hand if it was never installed anywhere.",
            )
        plan.append((wheel, index, there))
    outcomes = []
    for wheel, index, there in plan:
        if there:
            say(f"{wheel.target.name}: {wheel.path.name} is already published, the same file")
            outcomes.append(Outcome(wheel, index.simple_url, there["url"], uploaded=False))
            continue
        index.ensure(say)
        say(f"{wheel.target.name}: uploading {wheel.path.name} to {index.upload_url} "
            f"(credentials: {index.creds.source})")  # fmt: skip
        index.upload(wheel)
        back = index.published(wheel.project).get(wheel.path.name)
        if not back or (back["sha256"] and back["sha256"] != wheel.sha256):
            raise PackageIndexError(
                f"After the upload, the index for {wheel.target.name} "
                f"{'does not list' if not back else 'lists another file as'} {wheel.path.name} "
                f"at {index.simple_url}{wheel.project}/",
                fix="Check that registry.yaml's index.simple is where index.url's uploads appear.",
            )
        outcomes.append(Outcome(wheel, index.simple_url, back["url"], uploaded=True))
    for result, group in _by_result(outcomes).items():
        _record(result, [{"index": o.index, "file": o.wheel.path.name, "sha256": o.wheel.sha256,
                          "url": o.url} for o in group])  # fmt: skip
    return outcomes


def _by_result(outcomes: Iterable[Outcome]) -> dict[Path, list[Outcome]]:
    groups: dict[Path, list[Outcome]] = {}
    for outcome in outcomes:
        groups.setdefault(outcome.wheel.result, []).append(outcome)
    return groups


def _record(result: Path, published: list[dict[str, str]]) -> None:
    path = result / "manifest.json"
    data = json.loads(path.read_text())
    earlier = [p for p in data.get("published", []) if p.get("index") not in
               {q["index"] for q in published}]  # fmt: skip
    data["published"] = earlier + published
    write_atomic(path, (json.dumps(data, indent=2) + "\n").encode())


def board_lines(outcomes: list[Outcome], config: IndexConfig,
                locks: dict[str, Path] | None = None) -> list[str]:  # fmt: skip
    """What a board runs: the pip install line per target (with a wheel set's lock file, -r
    and --require-hashes: everything from the index, nothing compiled), and the /etc/pip.conf
    lines."""
    lines = []
    host = url_host(config.simple)
    plain = config.simple.startswith("http://") and not config.simple_loopback
    for simple, group in _group(outcomes, lambda o: o.index).items():
        target = group[0].wheel.target
        reqs = " ".join(sorted({f"{o.wheel.project}=={o.wheel.version}" for o in group}))
        trusted = f" --trusted-host {host}" if plain else ""
        lines.append(f"on a {target.name} board ({target.distro} {target.suite}, Python "
                     f"{target.python}):")  # fmt: skip
        needs = sorted({p for o in group for p in o.wheel.needs_apt})
        if needs:
            lines.append(f"  apt install {' '.join(needs)}   # shared libraries the wheels need")
        lock = (locks or {}).get(target.name)
        if lock is not None:
            lines.append(f"  copy {lock} to the board, then:")
            lines.append(f"  pip install --index-url {simple}{trusted} --only-binary :all: "
                         "--require-hashes -r requirements.txt")  # fmt: skip
        else:
            lines.append(f"  pip install --index-url {simple}{trusted} --only-binary :all: {reqs}")
        lines.append("  or for every pip install, in /etc/pip.conf (pip's default index stays "
                     "for pure-Python dependencies):")  # fmt: skip
        lines.append("    [global]")
        lines.append(f"    extra-index-url = {simple}")
        if plain:
            lines.append(f"    trusted-host = {host}")
    lines.append(
        "note: with extra-index-url pip takes the most specific wheel of the version from every "
        "index, and a manylinux wheel on the default index outranks a linux_* one: where that "
        "matters, install with --index-url as above."
    )
    if config.simple_loopback:
        lines.append(
            f"note: {config.simple} is this machine's loopback, which no board reaches: run the "
            "index on an address boards reach (scripts/setup-host --index-addr 0.0.0.0:3141) and "
            "set registry.yaml's index.url and index.simple to this machine's name or address"
        )
    return lines


def _group(items: Iterable[Outcome], key: Callable[[Outcome], str]) -> dict[str, list[Outcome]]:
    groups: dict[str, list[Outcome]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return groups


# --- the static archive ------------------------------------------------------------------------


@dataclass(frozen=True)
class Archived:
    path: Path
    wheel: Wheel
    added: bool


def _metadata(path: Path) -> bytes:
    """The wheel's METADATA (PEP 658 serves it beside the file)."""
    with zipfile.ZipFile(path) as archive:
        names = [n for n in archive.namelist()
                 if n.count("/") == 1 and n.split("/")[0].endswith(".dist-info")
                 and n.endswith("/METADATA")]  # fmt: skip
        if len(names) != 1:
            raise VerificationError(f"{path.name} has {len(names)} .dist-info/METADATA files",
                                    fix="Rebuild it: a wheel has exactly one.")  # fmt: skip
        return archive.read(names[0])


def archive(wheels: list[Wheel], directory: Path, say: Say) -> list[Archived]:
    """A static index per target under ``directory``: <target>/simple/index.html (and
    index.json, PEP 691), <target>/simple/<project>/ with each wheel, its PEP 658 .metadata and
    both pages, sha256 in every link. Served by any web server as is, or used by pip directly
    (--index-url file://DIRECTORY/<target>/simple/). Files already there stay as they are; a
    different file under a name already there is refused before anything is written."""
    for wheel in wheels:
        gate(wheel)
    for wheel in wheels:
        there = directory / wheel.target.name / "simple" / wheel.project / wheel.path.name
        if there.is_file() and sha256_file(there) != wheel.sha256:
            raise OutputError(
                f"{there} holds another file under this name; an index never changes a "
                "published file, and nothing was written",
                fix="Archive into a new directory, or publish a new version.",
            )
    results = []
    for wheel in wheels:
        project_dir = directory / wheel.target.name / "simple" / wheel.project
        project_dir.mkdir(parents=True, exist_ok=True)
        final = project_dir / wheel.path.name
        added = not final.is_file()
        if added:
            with tempfile.NamedTemporaryFile(dir=project_dir, prefix=".tmp-", delete=False) as tmp:
                with open(wheel.path, "rb") as source:
                    shutil.copyfileobj(source, tmp)
            os.replace(tmp.name, final)
            os.chmod(final, 0o644)
            write_atomic(project_dir / f"{wheel.path.name}.metadata", _metadata(final))
            if wheel.needs_apt:  # what the board installs with apt first, shown on the pages
                write_atomic(project_dir / f"{wheel.path.name}.needs-apt",
                             "".join(f"{p}\n" for p in wheel.needs_apt).encode())  # fmt: skip
        _write_project_pages(project_dir)
        _write_root_pages(directory / wheel.target.name / "simple")
        say(f"{wheel.target.name}: {'added' if added else 'already there, the same file:'} "
            f"{final}")  # fmt: skip
        results.append(Archived(final, wheel, added))
    return results


def _write_project_pages(project_dir: Path) -> None:
    project = project_dir.name
    files: list[dict[str, Any]] = []
    for path in sorted(project_dir.glob("*.whl")):
        metadata = project_dir / f"{path.name}.metadata"
        needs = project_dir / f"{path.name}.needs-apt"
        files.append({
            "filename": path.name,
            "url": path.name,
            "hashes": {"sha256": sha256_file(path)},
            **({"core-metadata": {"sha256": sha256_file(metadata)}} if metadata.is_file() else {}),
            **({"_needs_apt": needs.read_text().split()} if needs.is_file() else {}),
        })  # fmt: skip
    anchors = "\n".join(
        f'    <a href="{html.escape(f["url"])}#sha256={f["hashes"]["sha256"]}"'
        + (f' data-core-metadata="sha256={f["core-metadata"]["sha256"]}"'
           f' data-dist-info-metadata="sha256={f["core-metadata"]["sha256"]}"'
           if "core-metadata" in f else "")
        + f">{html.escape(f['filename'])}</a>"
        + (f" (on the board first: apt install {html.escape(' '.join(f['_needs_apt']))})"
           if "_needs_apt" in f else "")
        + "<br/>"
        for f in files
    )  # fmt: skip
    page = (f'<!DOCTYPE html>\n<html>\n  <head><meta name="pypi:repository-version" '
            f'content="1.1"><title>Links for {project}</title></head>\n  <body>\n'
            f"    <h1>Links for {project}</h1>\n{anchors}\n  </body>\n</html>\n")  # fmt: skip
    write_atomic(project_dir / "index.html", page.encode())
    body = {"meta": {"api-version": "1.1"}, "name": project, "files": files}
    write_atomic(project_dir / "index.json", (json.dumps(body, indent=2) + "\n").encode())


def _write_root_pages(simple: Path) -> None:
    projects = sorted(
        p.name for p in simple.iterdir() if p.is_dir() and (p / "index.html").is_file()
    )
    anchors = "\n".join(f'    <a href="{p}/">{p}</a><br/>' for p in projects)
    page = (f'<!DOCTYPE html>\n<html>\n  <head><meta name="pypi:repository-version" '
            f'content="1.1"><title>Simple index</title></head>\n  <body>\n{anchors}\n'
            "  </body>\n</html>\n")  # fmt: skip
    write_atomic(simple / "index.html", page.encode())
    body = {"meta": {"api-version": "1.1"}, "projects": [{"name": p} for p in projects]}
    write_atomic(simple / "index.json", (json.dumps(body, indent=2) + "\n").encode())

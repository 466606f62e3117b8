"""What a package says of itself is hostile input (issue 55): an sdist's PKG-INFO, a built
wheel's name and METADATA, and the URLs a user gives with credentials in them. Each is compared
with what was resolved, never used as a path, and never written down with its secret."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from dockerarch import pyreqs
from dockerarch.build import JobResult
from dockerarch.errors import OutputError, UsageError
from dockerarch.files import inside
from dockerarch.recipes import local_package
from dockerarch.render import plan
from dockerarch.sets import closure, contexts, model, output, reuse
from dockerarch.sets.errors import ResolutionError
from dockerarch.sets.indexes import Indexes
from dockerarch.sets.resolver import Candidate
from dockerarch.simple_api import IndexFile, redacted

ESCAPE = "1/../../../../tmp/x"


def _sdist(top: str, pkg_info: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, text in (("PKG-INFO", pkg_info), ("setup.py", "")):
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _wheel(path: Path, name: str, version: str) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{name}-{version}.dist-info/METADATA",
                         f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")  # fmt: skip
    return path


def _made(tmp_path: Path, sdist: bytes) -> tuple[model.TargetSet, Candidate]:
    digest = hashlib.sha256(sdist).hexdigest()
    cached = tmp_path / "out" / model.DOWNLOADS / digest[:2] / digest / "pkg-1.0.tar.gz"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(sdist)
    candidate = Candidate(name="pkg", version=Version("1.0"), file=IndexFile(
        filename="pkg-1.0.tar.gz", url="http://127.0.0.1:9/files/pkg-1.0.tar.gz",
        hashes={"sha256": digest}))  # fmt: skip
    wants = pyreqs.Wants(index_url="http://127.0.0.1:9/simple/")
    indexes = Indexes(wants, tmp_path / "out" / model.DOWNLOADS)
    request = plan("wheel", arch="armv7", target=None, version=None, package="pkg", settings={})[0]
    made = model.TargetSet(request=request, indexes=indexes, members={
        "pkg==1.0": model.Member(node=closure.Resolved(candidate=candidate))})  # fmt: skip
    return made, candidate


# --- a version spelled as a path --------------------------------------------------------------


def test_a_source_tree_whose_version_is_a_path_is_refused(tmp_path: Path) -> None:
    """`build wheel --package ./tree` and `-e ./tree` name the result NAME-VERSION from the tree's
    PKG-INFO: a version that is not PEP 440 (here one that climbs out of OUT) is a user error."""
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "setup.py").write_text("")
    (tree / "PKG-INFO").write_text(f"Metadata-Version: 2.1\nName: pkg\nVersion: {ESCAPE}\n")
    with pytest.raises(UsageError, match="is not a PEP 440 version"):
        local_package(tree)
    (tree / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: pkg\nVersion: 1.0-RC1\n")
    assert local_package(tree).version == "1.0rc1"  # normalised, as a wheel's file name has it


def test_no_result_path_resolves_outside_out(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "debian-armv7").mkdir(parents=True)
    assert inside(out, "debian-armv7", "pkg-1.0") == out / "debian-armv7" / "pkg-1.0"
    for name in (f"pkg-{ESCAPE}", "..", ".", "", "a\\b"):
        with pytest.raises(OutputError, match="not one plain file name"):
            inside(out, "debian-armv7", name)
    (out / "debian-armv7" / "pkg-2.0").symlink_to(tmp_path)  # planted beside the results
    with pytest.raises(OutputError, match="resolves outside"):
        inside(out, "debian-armv7", "pkg-2.0")


# --- what was resolved is what is built ----------------------------------------------------------


def test_an_sdist_whose_pkg_info_names_another_version_is_refused_before_unpacking(
    tmp_path: Path,
) -> None:
    """The index serves pkg-1.0.tar.gz (its hash matches the page) whose PKG-INFO says another
    version: refused with what it says and what was locked; nothing of it is unpacked."""
    made, _ = _made(
        tmp_path, _sdist("pkg-1.0", f"Metadata-Version: 2.1\nName: pkg\nVersion: {ESCAPE}\n")
    )
    with pytest.raises(ResolutionError) as err:
        contexts.build_requests(made, "pkg==1.0", tmp_path / "work")
    assert "says it is 'pkg' '1/../../../../tmp/x', but pkg==1.0 was resolved" in err.value.problem
    assert not (tmp_path / "work").exists()
    other, _ = _made(
        tmp_path / "b", _sdist("pkg-1.0", "Metadata-Version: 2.1\nName: corp-tool\nVersion: 1.0\n")
    )
    with pytest.raises(ResolutionError, match=r"'corp-tool' '1\.0'"):
        contexts.build_requests(other, "pkg==1.0", tmp_path / "work")
    fine, _ = _made(
        tmp_path / "c", _sdist("pkg-1.0", "Metadata-Version: 2.1\nName: PKG\nVersion: 1.0.0\n")
    )
    assert contexts.build_requests(fine, "pkg==1.0", tmp_path / "work").version == "1.0"


@pytest.mark.parametrize(("filename", "name", "version"), [
    ("evil-1.0-py3-none-any.whl", "evil", "1.0"),  # another project's file
    ("pkg-1.0-py3-none-any.whl", "pkg", "6.6.6"),  # the right file name over other metadata
    ("pkg-9.9-py3-none-any.whl", "pkg", "9.9"),  # a newer version than the lock pins
])  # fmt: skip
def test_a_built_wheel_that_is_not_the_member_is_not_taken(
    tmp_path: Path, filename: str, name: str, version: str
) -> None:
    """An sdist's setup.py can build anything: the wheel its build made must be the member, by
    its file name and its METADATA, or the member fails (the rest of the set goes on) and the
    wheel goes nowhere."""
    made, _ = _made(tmp_path, _sdist("pkg-1.0", "Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n"))
    member = made.members["pkg==1.0"]
    result_dir = tmp_path / "out" / "debian-armv7" / "pkg-1.0"
    result_dir.mkdir(parents=True)
    (result_dir / "manifest.json").write_text("{}")
    wheel = _wheel(result_dir / filename, name, version)
    reuse.take(
        member, JobResult(target="debian-armv7", directory=result_dir, artifacts=[wheel]), "hybrid"
    )
    assert member.path is None and member.error is not None
    assert "was resolved and locked" in member.error.problem
    assert json.loads((result_dir / "manifest.json").read_text()) == {}  # never marked reusable
    good = _wheel(tmp_path / "pkg-1.0-py3-none-any.whl", "pkg", "1.0")
    member.error = None
    reuse.take(
        member, JobResult(target="debian-armv7", directory=result_dir, artifacts=[good]), "hybrid"
    )
    assert member.error is None and member.path == good


# --- credentials in index URLs ---------------------------------------------------------------------


class Refusing:
    """An index that answers every request with 503."""

    def get(self, url: str, **_: Any) -> Any:
        response = type("R", (), {})()
        response.url, response.status_code, response.headers = url, 503, {}
        return response


def test_credentials_in_an_index_url_are_never_printed_or_written(tmp_path: Path) -> None:
    secret_url = "http://team:s3cret-token@127.0.0.1:9/simple/"
    assert redacted(secret_url) == "http://127.0.0.1:9/simple/"
    assert redacted("http://127.0.0.1:9/simple/") == "http://127.0.0.1:9/simple/"
    wants = pyreqs.Wants(index_url=secret_url, extra_index_urls=["https://u:p4ss@127.0.0.2/s/"],
                         requirements=[pyreqs.parse_line("six", "r.txt:1")])  # fmt: skip
    indexes = Indexes(wants, tmp_path / "dl", session=Refusing())  # type: ignore[arg-type]
    with pytest.raises(ResolutionError) as err:
        closure.resolve(wants, closure_target(), indexes)
    assert "p4ss" not in str(err.value) and "127.0.0.2/s/six/" in str(err.value)
    # the set's manifest: its indexes and every file's URL, without the userinfo
    wheel = _wheel(tmp_path / "six-1.16.0-py2.py3-none-any.whl", "six", "1.16.0")
    candidate = Candidate(name="six", version=Version("1.16.0"), file=IndexFile(
        filename=wheel.name, url="http://team:s3cret-token@127.0.0.1:9/files/" + wheel.name))  # fmt: skip
    request = plan("wheel", arch="armv7", target=None, version=None, package="six", settings={})[0]
    made = model.TargetSet(request=request, indexes=indexes, members={
        "six==1.16.0": model.Member(node=closure.Resolved(candidate=candidate), path=wheel)})  # fmt: skip
    written = output.write_set(made, tmp_path / "out", "r", wants)
    text = (written / "manifest.json").read_text()
    assert "s3cret" not in text and "p4ss" not in text
    manifest = json.loads(text)
    assert manifest["indexes"] == ["https://127.0.0.2/s/", "http://127.0.0.1:9/simple/"]
    assert manifest["distributions"][0]["from"] == "http://127.0.0.1:9/files/" + wheel.name


def closure_target() -> Any:
    from dockerarch.pyenv import python_target
    from dockerarch.targets import load_targets

    return python_target(load_targets()["debian-armv7"])

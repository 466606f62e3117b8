"""The package index stage without a server: the board-ABI gate at the door, where upload
credentials come from, reading an index's project pages, and the static archive tree."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from dockerarch import arm_probe, indexarchive, indexcreds, pkgindex, simple_api
from dockerarch.artifacts import VerificationError
from dockerarch.config import IndexConfig
from dockerarch.errors import OutputError, UsageError
from dockerarch.targets import load_targets

TARGETS = load_targets()


@pytest.fixture(autouse=True)
def _no_keyring(monkeypatch: pytest.MonkeyPatch) -> None:
    """No keyring backend (a desktop one would open a D-Bus socket) and none of the caller's
    twine settings."""
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.null.Keyring")
    for name in ("TWINE_USERNAME", "TWINE_PASSWORD", "TWINE_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)


def make_wheel(directory: Path, target: str, *, python: str = "cp311", extra: str = "") -> Path:
    arch = TARGETS[target].arch
    tag = arch.wheel_tag
    path = directory / f"demo-1.0-{python}-{python}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr("demo/__init__.py", extra)
        wheel.writestr("demo/_speed.so", arm_probe.probe_executable(arch.name))
        wheel.writestr("demo-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: demo\n"
                       "Version: 1.0\n")  # fmt: skip
        wheel.writestr("demo-1.0.dist-info/top_level.txt", "demo\n")
    return path


def built(out: Path, target: str, **kwargs: str) -> pkgindex.Wheel:
    result = out / target / "demo-1.0"
    result.mkdir(parents=True)
    path = make_wheel(result, target, **kwargs)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    artifact = {"name": path.name, "sha256": digest, "kind": "wheel"}
    (result / "manifest.json").write_text(json.dumps({"artifacts": [artifact]}))
    return pkgindex.Wheel(target=TARGETS[target], path=path, sha256=digest, result=result)


def test_the_gate_lets_a_wheel_for_the_target_through(tmp_path: Path) -> None:
    pkgindex.gate(built(tmp_path, "debian-armv7"))
    pkgindex.gate(built(tmp_path, "debian-aarch64"))


def test_the_gate_refuses_a_wheel_for_another_machine(tmp_path: Path) -> None:
    wheel = built(tmp_path, "debian-armv7")
    other = pkgindex.Wheel(target=TARGETS["debian-aarch64"], path=wheel.path,
                           sha256=wheel.sha256, result=wheel.result)  # fmt: skip
    with pytest.raises(VerificationError, match="linux_aarch64"):
        pkgindex.gate(other)


def test_the_gate_refuses_a_wheel_for_another_python(tmp_path: Path) -> None:
    assert TARGETS["trixie-armv7"].python == "3.13"
    wheel = built(tmp_path, "trixie-armv7", python="cp311")
    with pytest.raises(VerificationError, match=r"cp311.*'trixie-armv7' runs Python 3\.13"):
        pkgindex.gate(wheel)


def test_credentials_come_from_twines_places_in_twines_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = "https://pkgs.example.invalid/repository/rpi3/"
    state = tmp_path / "state"
    (state / "index").mkdir(parents=True)
    (state / "index" / "pypirc").write_text(
        "[dockerarch-local]\nrepository = https://pkgs.example.invalid/\nusername = local\n"
        "password = from-state\n"
    )
    home = tmp_path / "home"
    home.mkdir()
    found = indexcreds.credentials(url, state_dir=state, home=home)
    assert (found.username, found.password) == ("local", "from-state")
    assert "setup-host" in found.source and "from-state" not in repr(found)
    # The longest matching repository of ~/.pypirc wins over a shorter one.
    (home / ".pypirc").write_text(
        "[distutils]\nindex-servers = short long other\n"
        "[short]\nrepository = https://pkgs.example.invalid/\nusername = s\npassword = p-short\n"
        "[long]\nrepository = https://pkgs.example.invalid/repository/\nusername = l\n"
        "password = p-long\n"
        "[other]\nrepository = https://elsewhere.example.invalid/\nusername = o\npassword = p-o\n"
    )
    found = indexcreds.credentials(url, state_dir=state, home=home)
    assert (found.username, found.password, found.source) == (
        "l",
        "p-long",
        f"{home}/.pypirc [long]",
    )
    monkeypatch.setenv("TWINE_USERNAME", "ci")
    monkeypatch.setenv("TWINE_PASSWORD", "from-env")
    found = indexcreds.credentials(url, state_dir=state, home=home)
    assert (found.username, found.password) == ("ci", "from-env")


def test_setup_host_s_credentials_serve_its_index_on_a_lan_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # setup-host --index-addr 0.0.0.0:3141 writes them for the loopback URL; registry.yaml then
    # names this machine's LAN address, as the printed advice says
    state = tmp_path / "state"
    (state / "index").mkdir(parents=True)
    (state / "index" / "pypirc").write_text(
        "[dockerarch-local]\nrepository = http://127.0.0.1:3141/\nusername = dockerarch\n"
        "password = from-state\n"
    )
    monkeypatch.setattr(indexcreds, "this_machine", lambda host: host in ("192.0.2.10", "buildbox"))
    for url in ("http://192.0.2.10:3141/dockerarch/rpi3/", "http://buildbox:3141/dockerarch/x/"):
        found = indexcreds.credentials(url, state_dir=state, home=tmp_path)
        assert (found.username, found.password) == ("dockerarch", "from-state"), url
    # another machine, or this one on another port: not setup-host's index
    for url in (
        "http://192.0.2.99:3141/dockerarch/rpi3/",
        "http://192.0.2.10:8080/dockerarch/rpi3/",
    ):
        assert indexcreds.credentials(url, state_dir=state, home=tmp_path).password is None


def test_no_credentials_anywhere_is_said(tmp_path: Path) -> None:
    found = indexcreds.credentials("http://127.0.0.1:3141/dockerarch/x/", state_dir=tmp_path,
                                 home=tmp_path)  # fmt: skip
    assert found.password is None and found.source == "none found"


def test_a_malformed_pypirc_is_named_without_its_contents(tmp_path: Path) -> None:
    (tmp_path / ".pypirc").write_text("password = hunter2-secret\n[broken\n")
    with pytest.raises(UsageError, match=r"\.pypirc is not a valid") as caught:
        indexcreds.credentials("https://x.example.invalid/a/", state_dir=tmp_path, home=tmp_path)
    assert "hunter2" not in str(caught.value)


def test_project_pages_are_read_in_both_forms() -> None:
    digest = "ab" * 32
    page = (b'<html><body><a href="../../+f/1ab/demo-1.0-cp311-cp311-linux_armv7l.whl#sha256='
            + digest.encode() + b'">demo-1.0-cp311-cp311-linux_armv7l.whl</a></body></html>')  # fmt: skip
    base = "http://127.0.0.1:3141/dockerarch/rpi3/+simple/demo/"
    (html_file,) = simple_api.parse_project_page(page, "text/html; charset=utf-8", base)
    assert (html_file.filename, html_file.sha256) == (
        "demo-1.0-cp311-cp311-linux_armv7l.whl",
        digest,
    )
    assert (
        html_file.url
        == "http://127.0.0.1:3141/dockerarch/rpi3/+f/1ab/demo-1.0-cp311-cp311-linux_armv7l.whl"
    )
    body = json.dumps({"files": [{"filename": "demo-1.0.whl", "url": "../f/demo-1.0.whl",
                                  "hashes": {"sha256": digest}}]}).encode()  # fmt: skip
    (json_file,) = simple_api.parse_project_page(body, simple_api.SIMPLE_JSON, base)
    assert json_file.sha256 == digest
    assert json_file.url == "http://127.0.0.1:3141/dockerarch/rpi3/+simple/f/demo-1.0.whl"


def test_the_archive_is_a_static_index_per_target(tmp_path: Path) -> None:
    wheels = [built(tmp_path / "dist", "debian-armv7"), built(tmp_path / "dist", "debian-aarch64")]
    out = tmp_path / "archive"
    done = indexarchive.archive(wheels, out, say=lambda _: None)
    assert [d.added for d in done] == [True, True]
    for wheel in wheels:
        project = out / wheel.target.name / "simple" / "demo"
        assert (project / wheel.path.name).read_bytes() == wheel.path.read_bytes()
        page = (project / "index.html").read_text()
        assert f'href="{wheel.path.name}#sha256={wheel.sha256}"' in page
        metadata = (project / f"{wheel.path.name}.metadata").read_bytes()
        assert metadata.startswith(b"Metadata-Version: 2.1\nName: demo")
        meta_digest = hashlib.sha256(metadata).hexdigest()
        assert f'data-core-metadata="sha256={meta_digest}"' in page
        listing = json.loads((project / "index.json").read_text())
        assert listing["meta"]["api-version"] == "1.1"
        assert [f["filename"] for f in listing["files"]] == [wheel.path.name]
        # API 1.1 is PEP 700: the project's versions, and each file's size
        assert listing["versions"] == ["1.0"]
        assert listing["files"][0]["size"] == wheel.path.stat().st_size
        root = json.loads((out / wheel.target.name / "simple" / "index.json").read_text())
        assert root["projects"] == [{"name": "demo"}]
    # The aarch64 index does not offer the armv7 wheel.
    assert not list((out / "debian-aarch64").rglob("*armv7l.whl"))
    # The same files again: nothing changes.
    assert [d.added for d in indexarchive.archive(wheels, out, say=lambda _: None)] == [
        False,
        False,
    ]


def test_the_archive_never_changes_a_published_file(tmp_path: Path) -> None:
    wheel = built(tmp_path / "a", "debian-armv7")
    out = tmp_path / "archive"
    indexarchive.archive([wheel], out, say=lambda _: None)
    other = built(tmp_path / "b", "debian-armv7", extra="# another build\n")
    assert other.path.name == wheel.path.name and other.sha256 != wheel.sha256
    with pytest.raises(OutputError, match="holds another file under this name"):
        indexarchive.archive([other], out, say=lambda _: None)
    kept = out / "debian-armv7" / "simple" / "demo" / wheel.path.name
    assert kept.read_bytes() == wheel.path.read_bytes()


def test_board_lines_name_the_targets_index_and_what_a_lan_index_needs(tmp_path: Path) -> None:
    wheel = built(tmp_path, "debian-armv7")
    lan = IndexConfig(url="http://lab.example.invalid:3141/dockerarch/{target}/",
                      simple="http://lab.example.invalid:3141/dockerarch/{target}/+simple/")  # fmt: skip
    simple = lan.simple_url("debian-armv7")
    outcome = pkgindex.Outcome(wheel, simple, simple + "demo/x.whl", uploaded=True)
    lines = pkgindex.board_lines([outcome], lan)
    assert (f"  pip install --index-url {simple} --trusted-host lab.example.invalid "
            "--only-binary :all: demo==1.0") in lines  # fmt: skip
    # the board's pip.conf names this index alone: with extra-index-url beside a public index,
    # pip takes a name from whichever has the newest version (a squatted name would win)
    assert f"    index-url = {simple}" in lines
    assert not any(line.strip().startswith("extra-index-url") for line in lines)
    assert "    trusted-host = lab.example.invalid" in lines
    local = pkgindex.board_lines([outcome], IndexConfig())
    assert any("loopback, which no board reaches" in line for line in local)
    # uploads on loopback, boards reading the LAN address: the boards' lines decide from the
    # index they read (index.simple), trusted-host included
    split = IndexConfig(url="http://127.0.0.1:3141/dockerarch/{target}/",
                        simple="http://lab.example.invalid:3141/dockerarch/{target}/+simple/")  # fmt: skip
    lines = pkgindex.board_lines([outcome], split)
    assert "    trusted-host = lab.example.invalid" in lines
    assert not any("which no board reaches" in line for line in lines)
    inverse = IndexConfig(url=lan.url, simple="http://127.0.0.1:3141/dockerarch/{target}/+simple/")
    lines = pkgindex.board_lines([outcome], inverse)
    assert not any("trusted-host" in line for line in lines)
    assert any("which no board reaches" in line for line in lines)


def test_the_archive_shows_what_the_board_installs_with_apt_first(tmp_path: Path) -> None:
    wheel = built(tmp_path / "dist", "debian-armv7")
    wheel = pkgindex.Wheel(target=wheel.target, path=wheel.path, sha256=wheel.sha256,
                           result=wheel.result, needs_apt=("libgomp1",))  # fmt: skip
    out = tmp_path / "archive"
    indexarchive.archive([wheel], out, say=lambda _: None)
    project = out / "debian-armv7" / "simple" / "demo"
    assert "(on the board first: apt install libgomp1)" in (project / "index.html").read_text()
    (entry,) = json.loads((project / "index.json").read_text())["files"]
    assert entry["_needs_apt"] == ["libgomp1"]  # PEP 691: a private key, ignored by pip
    outcome = pkgindex.Outcome(wheel, "http://x.example.invalid/s/", "u", uploaded=True)
    lines = pkgindex.board_lines([outcome], IndexConfig())
    assert "  apt install libgomp1   # shared libraries the wheels need" in lines


def test_a_result_never_installed_on_its_target_is_published_by_neither_verb(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # build --no-smoke: no runtime image, so no library check and no needs_apt; upload must not
    # tell boards that nothing is needed, as push does not publish an image that was never made
    from dockerarch import publish
    from dockerarch.render import plan

    wheel = built(tmp_path, "debian-armv7")
    manifest = json.loads((wheel.result / "manifest.json").read_text())
    manifest.update(image={"tag": None, "id": None}, needs_apt=[], smoke=None)
    (wheel.result / "manifest.json").write_text(json.dumps(manifest))
    requests = plan("wheel", arch="armv7", target=None, version=None, package="demo==1.0",
                    settings={})  # fmt: skip
    monkeypatch.setattr(publish.engine, "image_labels", lambda _tag: None)
    for find in (pkgindex.find_wheels, publish.find_built):
        with pytest.raises(UsageError) as err:
            find(requests, tmp_path)
        assert "built with --no-smoke" in err.value.problem
        assert "dockerarch build wheel --package demo==1.0 --target debian-armv7" in err.value.fix
    manifest["image"] = {"tag": "dockerarch/demo:1.0-debian-armv7", "id": "sha256:" + "1" * 64}
    (wheel.result / "manifest.json").write_text(json.dumps(manifest))
    assert [w.path for w in pkgindex.find_wheels(requests, tmp_path)] == [wheel.path]

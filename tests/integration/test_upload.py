"""`dockerarch upload` against the devpi-server that scripts/setup-host runs on 127.0.0.1:3141:
the demo's zstandard wheels published to one index per target, installed by pip inside the armv7
runtime image from that index (and from a static archive) as the very file that was verified;
the index's credentials, and what is refused.

Each run publishes to indexes of its own (dockerarch/t<run>-<target>, created by the upload), so
a second run on the same machine starts from empty indexes."""

from __future__ import annotations

import configparser
import json
import os
import shutil
import subprocess
import threading
import time
import uuid
import zipfile
from pathlib import Path

import pytest
import requests

from .conftest import dockerarch

STATE = Path(os.environ.get("DOCKERARCH_STATE_DIR", "/var/lib/dockerarch"))
PACKAGE = "zstandard==0.23.0"
ARCHES = ("debian-armv7", "debian-aarch64")


@pytest.fixture(scope="module")
def index_config(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A registry.yaml naming this run's indexes on the local devpi, and the run's prefix."""
    run = f"t{uuid.uuid4().hex[:8]}"
    path = tmp_path_factory.mktemp("index") / "registry.yaml"
    path.write_text(
        "index:\n"
        f"  url: http://127.0.0.1:3141/dockerarch/{run}-{{target}}/\n"
        f"  simple: http://127.0.0.1:3141/dockerarch/{run}-{{target}}/+simple/\n"
    )
    return path, run


def upload(out: Path, config: Path, *args: str, env: dict[str, str] | None = None,
           arch: str = "armv7,aarch64") -> subprocess.CompletedProcess[str]:  # fmt: skip
    environ = {**os.environ, "DOCKERARCH_REGISTRY_CONFIG": str(config), **(env or {})}
    return dockerarch("upload", "wheel", "--package", PACKAGE, "--arch", arch, "--out", str(out),
                      *args, env=environ, timeout=600)  # fmt: skip


def said(done: subprocess.CompletedProcess[str]) -> str:
    """stderr with its line wrapping undone (messages are one wrapped paragraph)."""
    return " ".join(done.stderr.split())


def manifest(out: Path, target: str) -> dict[str, object]:
    return json.loads((out / target / "zstandard-0.23.0" / "manifest.json").read_text())  # type: ignore[no-any-return]


def wheel_of(out: Path, target: str) -> tuple[Path, str]:
    (artifact,) = manifest(out, target)["artifacts"]  # type: ignore[misc]
    return out / target / "zstandard-0.23.0" / artifact["name"], artifact["sha256"]


def armv7_copy(out: Path, tmp_path: Path) -> Path:
    """A copy of the armv7 result (as published by no one yet) in a dist directory of its own."""
    copy = tmp_path / "dist"
    shutil.copytree(out / "debian-armv7", copy / "debian-armv7")
    data = manifest(copy, "debian-armv7")
    data.pop("published", None)
    (copy / "debian-armv7" / "zstandard-0.23.0" / "manifest.json").write_text(json.dumps(data))
    return copy


def listed(run: str, target: str) -> dict[str, str]:
    """{file name: sha256} of zstandard on the run's index for ``target``."""
    url = f"http://127.0.0.1:3141/dockerarch/{run}-{target}/+simple/zstandard/"
    session = requests.Session()
    session.trust_env = False
    answer = session.get(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"}, timeout=30)
    if answer.status_code == 404:
        return {}
    answer.raise_for_status()
    return {f["filename"]: f["hashes"]["sha256"] for f in answer.json()["files"]}


def pip_in_runtime(out: Path, index_url: str, *mounts: str) -> dict[str, object]:
    """pip install zstandard from ``index_url`` inside the armv7 runtime image (emulated), and
    import it; pip's installation report."""
    image = manifest(out, "debian-armv7")["image"]["tag"]  # type: ignore[index]
    script = (
        "set -e; python3 -m pip uninstall -y -q zstandard; "
        f"python3 -m pip install -q --no-cache-dir --index-url {index_url} --only-binary :all: "
        f"--report /tmp/report.json {PACKAGE}; "
        'python3 -c \'import zstandard as z; d = b"board " * 1000; '
        "assert z.ZstdDecompressor().decompress(z.ZstdCompressor().compress(d)) == d; "
        'print("imported", z.__version__)\' >&2; cat /tmp/report.json'
    )
    done = subprocess.run(
        ["docker", "run", "--rm", "--network", "host", "--platform", "linux/arm/v7",
         "-e", "PIP_BREAK_SYSTEM_PACKAGES=1", *mounts, image, "sh", "-c", script],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "imported 0.23.0" in said(done)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def installed_sha256(report: dict[str, object]) -> str:
    (item,) = report["install"]  # type: ignore[misc]
    info = item["download_info"]["archive_info"]
    return str(info.get("hashes", {}).get("sha256") or info["hash"].removeprefix("sha256="))


def test_wheels_go_to_their_targets_index_and_pip_installs_the_verified_file(
    demo_dist: tuple[Path, object], index_config: tuple[Path, str]
) -> None:
    out, _ = demo_dist
    config, run = index_config
    done = upload(out, config)
    assert done.returncode == 0, done.stderr
    for target in ARCHES:
        wheel, digest = wheel_of(out, target)
        assert listed(run, target) == {wheel.name: digest}  # only its own target's wheel
        # one record for this run's index (other tests' uploads of the demo keep theirs)
        index = f"http://127.0.0.1:3141/dockerarch/{run}-{target}/+simple/"
        (published,) = [p for p in manifest(out, target)["published"] if p["index"] == index]  # type: ignore[attr-defined]
        assert published["sha256"] == digest and published["file"] == wheel.name
        assert f"#sha256={digest}" in done.stdout
        assert f"created index dockerarch/{run}-{target}" in said(done)
    assert "credentials: scripts/setup-host's index credentials" in said(done)
    simple = f"http://127.0.0.1:3141/dockerarch/{run}-debian-armv7/+simple/"
    assert f"pip install --index-url {simple} --only-binary :all: zstandard==0.23.0" in said(done)
    assert f"index-url = {simple}" in said(done) and "extra-index-url =" not in said(done)
    # The armv7 board's pip installs the very file that was verified, and it imports.
    report = pip_in_runtime(out, simple)
    assert installed_sha256(report) == wheel_of(out, "debian-armv7")[1]
    # The same files again: nothing uploaded, said as such.
    again = upload(out, config)
    assert again.returncode == 0, again.stderr
    assert said(again).count("is already published, the same file") == 2
    assert "uploading" not in said(again)


def test_the_index_never_takes_another_file_under_a_published_name(
    demo_dist: tuple[Path, object], index_config: tuple[Path, str], tmp_path: Path
) -> None:
    out, _ = demo_dist
    config, run = index_config
    assert upload(out, config, arch="armv7").returncode == 0
    wheel, digest = wheel_of(out, "debian-armv7")
    # A rebuild that differs (here: one more file in the wheel), recorded as verified.
    copy = armv7_copy(out, tmp_path)
    other, _ = wheel_of(copy, "debian-armv7")
    with zipfile.ZipFile(other, "a") as archive:
        archive.writestr("zstandard/REBUILT", "another build\n")
    data = manifest(copy, "debian-armv7")
    new_digest = __import__("hashlib").sha256(other.read_bytes()).hexdigest()
    data["artifacts"][0]["sha256"] = new_digest  # type: ignore[index]
    (copy / "debian-armv7" / "zstandard-0.23.0" / "manifest.json").write_text(json.dumps(data))
    done = upload(copy, config, arch="armv7")
    assert done.returncode == 4, done.stderr
    assert "already has" in said(done) and "with other contents" in said(done)
    assert "Traceback" not in done.stderr
    assert listed(run, "debian-armv7") == {wheel.name: digest}


def test_a_wheel_for_another_target_is_refused_at_the_door(
    demo_dist: tuple[Path, object], index_config: tuple[Path, str], tmp_path: Path
) -> None:
    out, _ = demo_dist
    config, run = index_config
    # The armv7 result where the aarch64 one belongs (a mix-up a user can make by copying).
    mixed = tmp_path / "dist"
    shutil.copytree(out / "debian-armv7", mixed / "debian-aarch64")
    done = upload(mixed, config, arch="aarch64")
    assert done.returncode == 7, done.stderr  # VerificationError: the gate at the door
    assert "linux_armv7l" in said(done) and "debian-aarch64" in said(done)
    assert "Traceback" not in done.stderr
    assert not any(name.endswith("armv7l.whl") for name in listed(run, "debian-aarch64"))


def test_an_index_that_does_not_answer_is_named_and_nothing_is_recorded(
    demo_dist: tuple[Path, object], tmp_path: Path
) -> None:
    copy = armv7_copy(demo_dist[0], tmp_path)
    config = tmp_path / "registry.yaml"
    config.write_text("index:\n  url: http://127.0.0.1:9/x/{target}/\n"
                      "  simple: http://127.0.0.1:9/x/{target}/+simple/\n")  # fmt: skip
    done = upload(copy, config, arch="armv7")
    assert done.returncode == 4, done.stderr
    assert "The package index at http://127.0.0.1:9 does not answer" in said(done)
    assert "nothing was uploaded" in said(done) and "Traceback" not in done.stderr
    assert "published" not in manifest(copy, "debian-armv7")


def _local_credentials() -> tuple[str, str]:
    parser = configparser.RawConfigParser()
    parser.read(STATE / "index" / "pypirc")
    section = parser["dockerarch-local"]
    return section["username"], section["password"]


def test_credentials_are_needed_and_never_shown(
    demo_dist: tuple[Path, object], tmp_path: Path
) -> None:
    copy = armv7_copy(demo_dist[0], tmp_path)
    run = f"a{uuid.uuid4().hex[:8]}"
    config = tmp_path / "registry.yaml"
    config.write_text(f"index:\n  url: http://127.0.0.1:3141/dockerarch/{run}-{{target}}/\n"
                      f"  simple: http://127.0.0.1:3141/dockerarch/{run}-{{target}}/+simple/\n")  # fmt: skip
    home = tmp_path / "home"
    home.mkdir()
    bare = {"HOME": str(home), "DOCKERARCH_STATE_DIR": str(tmp_path / "no-state"),
            "PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring"}  # fmt: skip
    # No credentials anywhere: a clear error, nothing uploaded.
    done = upload(copy, config, arch="armv7", env=bare)
    assert done.returncode == 4, done.stderr
    assert "needs credentials" in said(done) and "~/.pypirc" in said(done)
    assert "Traceback" not in done.stderr
    assert listed(run, "debian-armv7") == {}
    # The index exists (made by its owner) and takes uploads from its owner only: without
    # credentials the index itself refuses, said as such.
    username, password = _local_credentials()
    session = requests.Session()
    session.trust_env = False
    made = session.put(f"http://127.0.0.1:3141/dockerarch/{run}-debian-armv7", timeout=30,
                       auth=(username, password), json={"type": "stage", "bases": [],
                       "volatile": False, "acl_upload": [username]})  # fmt: skip
    assert made.status_code in (200, 201), made.text
    done = upload(copy, config, arch="armv7", env=bare)
    assert done.returncode == 4, done.stderr
    assert "refused the upload" in said(done) and "credentials: none found" in said(done)
    assert listed(run, "debian-armv7") == {}
    # In ~/.pypirc, as twine users keep them: the upload works, and the password shows nowhere.
    (home / ".pypirc").write_text(
        "[distutils]\nindex-servers = lab\n\n[lab]\nrepository = http://127.0.0.1:3141/\n"
        f"username = {username}\npassword = {password}\n"
    )
    seen: list[str] = []
    stop = threading.Event()

    def scan() -> None:  # every process's argv and environment, while the upload runs
        while not stop.is_set():
            for proc in Path("/proc").iterdir():
                for name in ("cmdline", "environ"):
                    try:
                        if password.encode() in (proc / name).read_bytes():
                            seen.append(f"{proc.name}/{name}")
                    except OSError:
                        pass
            time.sleep(0.05)

    scanner = threading.Thread(target=scan)
    scanner.start()
    try:
        done = upload(copy, config, arch="armv7", env=bare)
    finally:
        stop.set()
        scanner.join()
    assert done.returncode == 0, done.stderr
    assert f"credentials: {home}/.pypirc [lab]" in said(done)
    wheel, digest = wheel_of(copy, "debian-armv7")
    assert listed(run, "debian-armv7") == {wheel.name: digest}
    assert seen == []
    assert password not in done.stdout + done.stderr
    for path in copy.rglob("*"):
        if path.is_file() and path.suffix != ".whl":
            assert password.encode() not in path.read_bytes(), path


def test_the_static_archive_installs_with_pip(
    demo_dist: tuple[Path, object], tmp_path: Path
) -> None:
    out, _ = demo_dist
    archive = tmp_path / "archive"
    config = tmp_path / "registry.yaml"
    config.write_text("index:\n  url: http://127.0.0.1:9/x/{target}/\n"
                      "  simple: http://127.0.0.1:9/x/{target}/+simple/\n")  # fmt: skip
    done = upload(out, config, "--archive", str(archive))  # no index needed, none asked
    assert done.returncode == 0, done.stderr
    assert not list((archive / "debian-aarch64").rglob("*armv7l.whl"))
    report = pip_in_runtime(out, "file:///archive/debian-armv7/simple/",
                            "-v", f"{archive}:/archive:ro")  # fmt: skip
    assert installed_sha256(report) == wheel_of(out, "debian-armv7")[1]

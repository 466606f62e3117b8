"""`dockerarch push` against real registries (Debian's docker-registry on free loopback ports):
a multi-arch index boards pull, atomic under faults injected by a TCP proxy, TLS with htpasswd
auth and docker's own credential store, and archives for boards that reach no registry."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import CEXT, dockerarch
from .registries import INDEX_ACCEPT, FaultProxy, Registry, platforms, registry

NAME = "dockerarch_tinyext"
TARGETS = {"debian-armv7": "linux/arm/v7", "debian-aarch64": "linux/arm64"}
TRY = "import tinyext, tinyxx; print(tinyext.machine(), tinyxx.square(7))"


@pytest.fixture(scope="module", autouse=True)
def _untag_test_registries() -> Iterator[None]:
    """Pushing tags each image with every test registry's address: those tags go afterwards."""
    yield
    listed = subprocess.run(["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}"],
                            capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    ours = [r for r in listed if r.startswith("127.0.0.1:") and not r.startswith("127.0.0.1:5000/")
            and f"/dockerarch/{NAME}:" in r]  # fmt: skip
    if ours:
        subprocess.run(["docker", "image", "rm", *ours], capture_output=True, check=False)


@pytest.fixture(scope="module")
def built(cext_dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The extension's results and runtime images as build leaves them (every step cached: the
    session's build made them; other modules may have re-tagged the images since)."""
    out = tmp_path_factory.mktemp("pushdist")
    done = dockerarch("build", "wheel", "--package", str(CEXT), "--arch", "armv7,aarch64",
                      "--out", str(out), timeout=3600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def configure(project: Path, reg: Registry | str, **extra: object) -> Path:
    """A working directory whose registry.yaml points at ``reg``."""
    project.mkdir(parents=True, exist_ok=True)
    address = reg if isinstance(reg, str) else reg.address
    lines = ["registry:", f"  address: {address}"]
    lines += [f"  {k}: {json.dumps(v) if isinstance(v, bool) else v}" for k, v in extra.items()]
    if "insecure" not in extra:
        lines.append("  insecure: true")
    (project / "registry.yaml").write_text("\n".join(lines) + "\n")
    return project


def push(project: Path, built: Path, *args: str, env: dict[str, str] | None = None,
         arch: str = "armv7,aarch64") -> subprocess.CompletedProcess[str]:  # fmt: skip
    return dockerarch("push", "wheel", "--package", str(CEXT), "--arch", arch, "--out", str(built),
                      *args, cwd=project, env=env, timeout=900)  # fmt: skip


def flat(text: str) -> str:
    """Output with its line wrapping undone (errors are wrapped paragraphs)."""
    return " ".join(text.split())


def manifest(built: Path, target: str) -> dict[str, object]:
    path = built / target / f"{NAME}-1.0.0" / "manifest.json"
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def image_id(ref: str) -> str:
    done = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", ref],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return done.stdout.strip()


def index_of(reg: Registry, tag: str) -> tuple[str, list[str]]:
    data, _ = reg.get(f"dockerarch/{NAME}/manifests/{tag}", INDEX_ACCEPT)
    return "sha256:" + hashlib.sha256(data).hexdigest(), platforms(data)


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with registry(tmp_path_factory.mktemp("plain-registry")) as reg:
        yield reg


@pytest.fixture(scope="module")
def published(built: Path, plain: Registry, tmp_path_factory: pytest.TempPathFactory
              ) -> tuple[subprocess.CompletedProcess[str], Path]:  # fmt: skip
    project = configure(tmp_path_factory.mktemp("project"), plain)
    done = push(project, built, "--tag", "latest")
    assert done.returncode == 0, done.stderr[-3000:]
    return done, project


def test_push_writes_an_index_of_both_platforms(
    published: tuple[subprocess.CompletedProcess[str], Path], plain: Registry, built: Path
) -> None:
    done, _ = published
    repo = f"{plain.address}/dockerarch/{NAME}"
    digest, listed = index_of(plain, "1.0.0")
    # The registry's own API lists exactly the expected platforms, under both tags.
    assert sorted(listed) == sorted(TARGETS.values())
    assert index_of(plain, "latest") == (digest, listed)
    assert f"{repo}:1.0.0@{digest}" in done.stdout.splitlines()
    assert f"{repo}:latest@{digest}" in done.stdout.splitlines()
    assert f"on a board: docker pull {repo}:1.0.0" in flat(done.stderr)
    assert "loopback, which no board reaches" in flat(done.stderr)
    tags = json.loads(plain.get(f"dockerarch/{NAME}/tags/list")[0])["tags"]
    assert sorted(tags) == sorted(["1.0.0", "latest", "1.0.0-debian-armv7", "1.0.0-debian-aarch64"])
    index = json.loads(plain.get(f"dockerarch/{NAME}/manifests/1.0.0", INDEX_ACCEPT)[0])
    for target, platform in TARGETS.items():
        pushed = manifest(built, target)["pushed"]
        assert isinstance(pushed, dict)
        assert pushed["index_digest"] == digest and pushed["registry"] == plain.address
        assert pushed["image"] == f"{repo}:1.0.0-{target}"
        # Each child is listed by the digest the per-target tag resolves to, with its platform.
        _, headers = plain.get(f"dockerarch/{NAME}/manifests/1.0.0-{target}",
                               "application/vnd.docker.distribution.manifest.v2+json")  # fmt: skip
        assert headers["Docker-Content-Digest"] == pushed["image_digest"]
        (child,) = [c for c in index["manifests"] if c["digest"] == pushed["image_digest"]]
        assert "/".join(filter(None, (child["platform"]["os"], child["platform"]["architecture"],
                                      child["platform"].get("variant")))) == platform  # fmt: skip


def test_a_second_push_of_the_same_build_changes_nothing(
    published: tuple[subprocess.CompletedProcess[str], Path], plain: Registry, built: Path
) -> None:
    _, project = published
    before = index_of(plain, "1.0.0")
    again = push(project, built)
    assert again.returncode == 0, again.stderr[-2000:]
    assert index_of(plain, "1.0.0") == before
    assert "moved from" not in flat(again.stderr)


def test_build_push_publishes_right_after_the_build(
    published: tuple[subprocess.CompletedProcess[str], Path], plain: Registry, built: Path
) -> None:
    _, project = published
    before = index_of(plain, "1.0.0")
    ids_before = {t: manifest(built, t)["image"]["id"] for t in TARGETS}  # type: ignore[index]
    done = dockerarch("build", "wheel", "--package", str(CEXT), "--arch", "armv7,aarch64",
                      "--out", str(built), "--push", cwd=project, timeout=3600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    after = index_of(plain, "1.0.0")
    index = json.loads(plain.get(f"dockerarch/{NAME}/manifests/1.0.0", INDEX_ACCEPT)[0])
    # What is published is what this build verified: each child is the image it recorded, which
    # the engine still holds under its tag, and the index is the one printed.
    ids_after = {}
    for target, platform in TARGETS.items():
        recorded = manifest(built, target)
        image, pushed = recorded["image"], recorded["pushed"]
        assert isinstance(image, dict) and isinstance(pushed, dict)
        assert image_id(image["tag"]) == image["id"]
        assert pushed["index_digest"] == after[0]
        (child,) = [c for c in index["manifests"] if c["digest"] == pushed["image_digest"]]
        assert child["platform"]["architecture"] == platform.split("/")[1]
        ids_after[target] = image["id"]
    assert f"{plain.address}/dockerarch/{NAME}:1.0.0@{after[0]}" in done.stdout.splitlines()
    assert "on a board: docker pull" in flat(done.stderr)
    if ids_after == ids_before:
        # The same images (every step cached) publish the same index: the tag does not move.
        assert after == before, (ids_before, done.stderr[-2000:])
        assert "moved from" not in flat(done.stderr)
    else:
        # The engine's cache held a second result for the same steps (a --no-cache build of
        # the same package leaves one, and BuildKit may load either): other images, a new
        # index, and the move is said.
        assert after[0] != before[0]
        assert f"moved from {before[0]} to {after[0]}" in flat(done.stderr), done.stderr[-2000:]


def test_push_survives_dropped_connections(built: Path, tmp_path: Path) -> None:
    """The first connections are cut in the middle of a blob upload: the engine and dockerarch
    try again, and what lands is what was built."""
    with registry(tmp_path / "registry") as reg, FaultProxy(reg.address, drop_first=2) as proxy:
        done = push(configure(tmp_path / "project", proxy.address), built)
        assert done.returncode == 0, done.stderr[-3000:]
        assert proxy.dropped == 2
        digest, listed = index_of(reg, "1.0.0")
    assert sorted(listed) == sorted(TARGETS.values())
    for target in TARGETS:
        pushed = manifest(built, target)["pushed"]
        assert isinstance(pushed, dict) and pushed["index_digest"] == digest


def test_a_push_that_cannot_finish_leaves_the_old_index(built: Path, tmp_path: Path) -> None:
    with registry(tmp_path / "registry") as reg:
        old = push(configure(tmp_path / "direct", reg), built, arch="aarch64")
        assert old.returncode == 0, old.stderr[-2000:]
        old_index = index_of(reg, "1.0.0")
        assert old_index[1] == ["linux/arm64"]

        # Every child lands, but each write of the index tag is cut: retried, then refused.
        cut = f"PUT /v2/dockerarch/{NAME}/manifests/1.0.0 ".encode()
        with FaultProxy(reg.address, drop_matching=cut) as proxy:
            done = push(configure(tmp_path / "cut", proxy.address), built)
        assert done.returncode == 9, done.stderr[-2000:]
        assert "Traceback" not in flat(done.stderr)
        assert f"writing dockerarch/{NAME}:1.0.0 at {proxy.address} failed after 4 tries" in flat(
            done.stderr
        )
        assert proxy.dropped == 4
        assert index_of(reg, "1.0.0") == old_index  # the tag never moved

        # Nothing gets through at all: a clear error before anything is pushed.
        with FaultProxy(reg.address, drop_all=True) as proxy:
            done = push(configure(tmp_path / "down", proxy.address), built)
        assert done.returncode == 9 and "failed after 4 tries" in flat(done.stderr), done.stderr
        assert "  pushing " not in done.stderr  # said before any push began
        assert index_of(reg, "1.0.0") == old_index


def test_two_targets_of_one_platform_cannot_share_an_index(tmp_path: Path) -> None:
    done = dockerarch("push", "wheel", "--package", str(CEXT), "--target", "rpi3,pynq-z1",
                      "--out", str(tmp_path), cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "rpi3 and pynq-z1 are both linux/arm/v7: one index cannot hold" in flat(done.stderr)
    assert "--index-tag 1.0.0-pynq-z1" in flat(done.stderr)


def test_pushing_what_was_not_built_is_refused(built: Path, tmp_path: Path) -> None:
    done = dockerarch("push", "wheel", "--package", str(CEXT), "--arch", "armv7",
                      "--out", str(tmp_path), cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2
    assert "Nothing built for debian-armv7" in flat(done.stderr)
    assert f"dockerarch build wheel --package {CEXT} --target debian-armv7" in flat(done.stderr)


# --- TLS and credentials ------------------------------------------------------------------------

PASSWORD = "s3cret-" + base64.b32encode(os.urandom(10)).decode().lower()


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """docker-registry with a self-signed certificate and htpasswd auth on a free port."""
    root = tmp_path_factory.mktemp("secured")
    cert, key = root / "cert.pem", root / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)  # fmt: skip
    # The password reaches htpasswd on stdin (-i), never in argv.
    hashed = subprocess.run(["htpasswd", "-niB", "tester"], input=PASSWORD, capture_output=True,
                            text=True, check=True)  # fmt: skip
    (root / "htpasswd").write_text(hashed.stdout)
    with registry(root, htpasswd=root / "htpasswd", tls=(cert, key)) as reg:
        yield reg


def _argv_watch(stop: threading.Event, seen: list[str]) -> None:
    secret = PASSWORD.encode()
    while not stop.is_set():
        for proc in Path("/proc").iterdir():
            try:
                if secret in (proc / "cmdline").read_bytes():
                    seen.append(proc.name)
            except OSError:
                continue


def test_tls_registry_needs_a_login_and_never_sees_the_password_in_argv(
    built: Path, secured: Registry, tmp_path: Path
) -> None:
    assert secured.ca is not None
    project = configure(tmp_path / "project", secured, insecure=False, ca=secured.ca)
    env = {"DOCKER_CONFIG": str(tmp_path / "docker-config")}

    refused = push(project, built, env=env)
    assert refused.returncode == 9, refused.stderr[-2000:]
    assert "needs credentials" in flat(refused.stderr)
    assert f"docker login {secured.address} --username USER --password-stdin" in flat(
        refused.stderr
    )

    login = subprocess.run(["docker", "login", secured.address, "--username", "tester",
                            "--password-stdin"], input=PASSWORD, capture_output=True, text=True,
                           env={**os.environ, **env}, timeout=60)  # fmt: skip
    assert login.returncode == 0, login.stderr

    stop, seen = threading.Event(), []  # type: ignore[var-annotated]
    watcher = threading.Thread(target=_argv_watch, args=(stop, seen), daemon=True)
    watcher.start()
    try:
        done = push(project, built, env=env)
    finally:
        stop.set()
        watcher.join()
    assert done.returncode == 0, done.stderr[-3000:]
    assert seen == [], "the password was in a process's argv during the push"
    assert "/etc/docker/certs.d/" in flat(done.stderr)  # what the board's dockerd needs
    auth = base64.b64encode(f"tester:{PASSWORD}".encode()).decode()
    _, listed = index_of_auth(secured, auth)
    assert sorted(listed) == sorted(TARGETS.values())
    # Nowhere else: not in output, results, logs or the image.
    assert PASSWORD not in done.stdout + done.stderr + refused.stdout + refused.stderr
    for target in TARGETS:
        result = built / target / f"{NAME}-1.0.0"
        for path in result.iterdir():
            assert PASSWORD.encode() not in path.read_bytes(), path
        tag = str(manifest(built, target)["image"]["tag"])  # type: ignore[index]
        history = subprocess.run(["docker", "history", "--no-trunc", tag], capture_output=True,
                                 text=True, check=True)  # fmt: skip
        assert PASSWORD not in history.stdout
        saved = subprocess.run(["docker", "save", tag], capture_output=True, check=True)
        assert PASSWORD.encode() not in saved.stdout


def index_of_auth(reg: Registry, auth: str) -> tuple[str, list[str]]:
    data, _ = reg.get(f"dockerarch/{NAME}/manifests/1.0.0", INDEX_ACCEPT, auth=auth)
    return "sha256:" + hashlib.sha256(data).hexdigest(), platforms(data)


# --- boards: pulls and archives (last: they remove the local images and put them back) ----------


@pytest.mark.serial  # removes the runtime images other tests run
def test_boards_pull_the_index_and_run_it(
    published: tuple[subprocess.CompletedProcess[str], Path], plain: Registry, built: Path
) -> None:
    repo = f"{plain.address}/dockerarch/{NAME}"
    for target, platform in TARGETS.items():
        local = str(manifest(built, target)["image"]["tag"])  # type: ignore[index]
        built_id = image_id(local)
        # Every local copy goes: the board has nothing but the registry.
        subprocess.run(["docker", "image", "rm", "--force", built_id], check=True,
                       capture_output=True)  # fmt: skip
        assert subprocess.run(["docker", "image", "inspect", built_id],
                              capture_output=True).returncode != 0  # fmt: skip
        subprocess.run(["docker", "pull", "--platform", platform, f"{repo}:1.0.0"], check=True,
                       capture_output=True, timeout=600)  # fmt: skip
        assert image_id(f"{repo}:1.0.0") == built_id  # the very image that was verified
        ran = subprocess.run(["docker", "run", "--rm", "--platform", platform, f"{repo}:1.0.0",
                              "python3", "-c", TRY], capture_output=True, text=True, timeout=300)  # fmt: skip
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.split() == [
            {"linux/arm/v7": "armv7l", "linux/arm64": "aarch64"}[platform],
            "49",
        ]
        subprocess.run(["docker", "tag", f"{repo}:1.0.0", local], check=True)
        subprocess.run(["docker", "image", "rm", f"{repo}:1.0.0"], check=True, capture_output=True)


@pytest.mark.serial  # removes the runtime images other tests run
def test_archives_load_on_an_engine_without_the_image(
    built: Path, plain: Registry, tmp_path: Path
) -> None:
    archives = tmp_path / "archives"
    archives.mkdir()
    done = dockerarch("push", "wheel", "--package", str(CEXT), "--arch", "armv7,aarch64",
                      "--out", str(built), "--archive", str(archives), cwd=tmp_path, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    names = sorted(p.name for p in archives.iterdir())
    assert names == sorted([
        f"{NAME}-1.0.0-debian-aarch64.docker.tar", f"{NAME}-1.0.0-debian-aarch64.docker.tar.sha256",
        f"{NAME}-1.0.0-debian-armv7.docker.tar", f"{NAME}-1.0.0-debian-armv7.docker.tar.sha256",
        f"{NAME}-1.0.0.oci.tar", f"{NAME}-1.0.0.oci.tar.sha256",
    ])  # fmt: skip
    for name in names:
        if name.endswith(".sha256"):
            digest, file = (archives / name).read_text().split()
            assert hashlib.sha256((archives / file).read_bytes()).hexdigest() == digest
    for target, platform in TARGETS.items():
        local = str(manifest(built, target)["image"]["tag"])  # type: ignore[index]
        built_id = image_id(local)
        subprocess.run(
            ["docker", "image", "rm", "--force", built_id], check=True, capture_output=True
        )
        subprocess.run(["docker", "load", "-i", str(archives / f"{NAME}-1.0.0-{target}.docker.tar")],
                       check=True, capture_output=True, timeout=600)  # fmt: skip
        assert image_id(local) == built_id
        ran = subprocess.run(["docker", "run", "--rm", "--platform", platform, local, "python3",
                              "-c", TRY], capture_output=True, text=True, timeout=300)  # fmt: skip
        assert ran.returncode == 0, ran.stderr
    # The OCI layout holds the whole index: skopeo copies it into a registry, both platforms.
    copied = subprocess.run(["skopeo", "copy", "--all", "--dest-tls-verify=false",
                             f"oci-archive:{archives / f'{NAME}-1.0.0.oci.tar'}",
                             f"docker://{plain.address}/dockerarch/{NAME}:from-archive"],
                            capture_output=True, text=True, timeout=600)  # fmt: skip
    assert copied.returncode == 0, copied.stderr
    assert sorted(index_of(plain, "from-archive")[1]) == sorted(TARGETS.values())

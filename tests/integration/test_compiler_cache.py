"""A team's shared compiler cache (scripts/setup-host's nginx on 127.0.0.1:3142): a build fills
it, the same build on a "fresh machine" (--no-cache: no layer cache, and the local ccache mount
starting empty) compiles nothing and makes the same wheel, another toolchain gets no hit, a
server that stops answering mid-build costs only its hits (the build stops asking it), and wrong credentials stop the build
before it starts, said without the secret. Loopback only."""

from __future__ import annotations

import hashlib
import http.server
import random
import re
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import dockerarch
from .test_farm import free_port, write_project

STATE = Path("/var/lib/dockerarch")
ACCESS_LOG = STATE / "ccache" / "logs" / "access.log"


def counters() -> dict[tuple[str, str], int]:
    """The server's own record: requests by (method, status) for ccache's objects."""
    found: dict[tuple[str, str], int] = {}
    for method, status in re.findall(r'"(GET|PUT) /ccache/[0-9a-f]{16}/\S+ HTTP/[0-9.]+" (\d+)',
                                     ACCESS_LOG.read_text() if ACCESS_LOG.exists() else ""):  # fmt: skip
        found[method, status] = found.get((method, status), 0) + 1
    return found


def grown(before: dict[tuple[str, str], int], key: tuple[str, str]) -> int:
    return counters().get(key, 0) - before.get(key, 0)


def config(tmp_path: Path, url: str) -> dict[str, str]:
    path = tmp_path / "registry.yaml"
    path.write_text(f"compiler_cache: {{url: '{url}'}}\n")
    return {"DOCKERARCH_REGISTRY_CONFIG": str(path)}


def build(project: Path, out: Path, env: dict[str, str], *args: str, arch: str = "armv7"):  # type: ignore[no-untyped-def]
    # --no-smoke: what the cache does ends with the wheel (and the suite's minutes count)
    return dockerarch("build", "wheel", "--package", str(project), "--arch", arch, "--no-smoke",
                      "--out", str(out), "--progress", "plain", *args, env=env, timeout=3600)  # fmt: skip


def said(done) -> str:  # type: ignore[no-untyped-def]
    return " ".join(done.stderr.split())


def wheel(out: Path, target: str = "debian-armv7") -> bytes:
    (path,) = (out / target / "farmdemo-1.0").glob("*.whl")
    return path.read_bytes()


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """A project no build has compiled, and the registry.yaml that names setup-host's cache."""
    root = tmp_path_factory.mktemp("shared-cache")
    project = write_project(root / "project", salt=random.randrange(1 << 30))
    yield project, config(root, "http://127.0.0.1:3142/ccache/")


def test_a_fresh_machine_compiles_nothing_the_team_compiled(
    shared: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    project, env = shared
    before = counters()
    first = build(project, tmp_path / "a", env)
    assert first.returncode == 0, first.stderr[-3000:]
    sent = grown(before, ("PUT", "201"))
    assert sent > 0 and "0 remote hits" in said(first), said(first)[-2000:]
    # Every local cache gone: no layer cache, the ccache mount starting empty
    before = counters()
    again = build(project, tmp_path / "b", env, "--no-cache")
    assert again.returncode == 0, again.stderr[-3000:]
    text = said(again)
    found = re.search(
        r"shared compiler cache \S+: 0 local hits, (\d+) remote hits, 0 compiled, "
        r"0 objects sent",
        text,
    )
    assert found and int(found.group(1)) >= 37, text[-3000:]  # every C file of the project
    assert grown(before, ("GET", "200")) >= int(found.group(1))  # the server served them
    # nothing sent back: every key was the first build's, though uv's build environment (whose
    # empty include directory setuptools puts in each compile's -I) has another random path
    assert wheel(tmp_path / "b") == wheel(tmp_path / "a")  # the same bytes
    record = (tmp_path / "b" / "debian-armv7" / "farmdemo-1.0" / "manifest.json").read_text()
    assert '"ccache_remote_hits": ' + found.group(1) in record
    assert "dockerarch:" not in record and "3142/ccache/" not in record.split('"hybrid"')[1][:2000]


def test_another_toolchain_gets_no_hit(shared: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    # the same sources for aarch64: another cross compiler, another digest, another key space
    project, env = shared
    done = build(project, tmp_path, env, arch="aarch64")  # never built for aarch64: compiled
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(
        r"shared compiler cache \S+: 0 local hits, 0 remote hits, [1-9]\d* compiled", said(done)
    ), said(done)[-2000:]


def test_a_server_that_stops_answering_mid_build_costs_only_its_hits(tmp_path: Path) -> None:
    # a server that answers dockerarch's check, then is gone when the compiles ask it
    class Once(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server calls it by this name
            self.send_error(404)
            threading.Thread(target=server.shutdown, daemon=True).start()

        def log_message(self, *args: object) -> None:
            pass

    port = free_port("127.0.0.1")
    server = http.server.HTTPServer(("127.0.0.1", port), Once)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    project = write_project(tmp_path / "project", salt=random.randrange(1 << 30), funcs=4)
    env = config(tmp_path, f"http://127.0.0.1:{port}/ccache/")
    try:
        done = build(project, tmp_path / "out", env)
    finally:
        server.server_close()
    assert done.returncode == 0, done.stderr[-3000:]
    text = said(done)
    # the first compile waits for its timeout; the build asks the server no more after that, or
    # each of the 37 compiles would wait for its own (connections queue unanswered: 15 s each)
    found = re.search(r"warning: the shared compiler cache failed (\d+) compiles' lookups or "
                      r"writes .*?; the build's (\d+) later compiles did not ask it again", text)  # fmt: skip
    assert "0 remote hits" in text and found, text[-2000:]
    failed, skipped = int(found.group(1)), int(found.group(2))
    assert failed <= 2 and failed + skipped >= 37, text[-2000:]
    assert wheel(tmp_path / "out")
    record = (tmp_path / "out" / "debian-armv7" / "farmdemo-1.0" / "manifest.json").read_text()
    assert f'"ccache_remote_skipped": {skipped}' in record


def test_wrong_credentials_stop_the_build_before_it_starts_and_stay_unsaid(
    shared: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    project, env = shared
    secret = "wrong-" + hashlib.sha256(str(random.random()).encode()).hexdigest()[:12]
    done = build(project, tmp_path, {**env, "DOCKERARCH_CACHE_PASSWORD": secret})
    assert done.returncode == 4, done.stderr[-2000:]
    assert "refused this machine's credentials (401" in said(done)
    assert secret not in done.stderr + done.stdout and "Traceback" not in done.stderr
    assert not (tmp_path / "debian-armv7").exists()  # nothing was built
    # and --no-compiler-cache builds without it
    done = build(
        project, tmp_path, {**env, "DOCKERARCH_CACHE_PASSWORD": secret}, "--no-compiler-cache"
    )
    assert done.returncode == 0 and "shared compiler cache" not in done.stderr, done.stderr[-2000:]
    with zipfile.ZipFile(next((tmp_path / "debian-armv7" / "farmdemo-1.0").glob("*.whl"))) as z:
        assert any(n.startswith("farmmod") for n in z.namelist())

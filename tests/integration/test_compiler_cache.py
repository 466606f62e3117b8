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
import requests

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


# --- who may write ---------------------------------------------------------------------------------

WRITER, READER = STATE / "ccache" / "credentials", STATE / "ccache" / "reader-credentials"


def _auth(path: Path) -> tuple[str, str]:
    user, _, password = path.read_text().strip().partition(":")
    return user, password


def test_the_server_refuses_the_reader_every_write(tmp_path: Path) -> None:
    """setup-host's server: the reader's credential reads; PUT and DELETE need the writer's (the
    server itself refuses them, whatever a client's read-only attribute says); doctor checks it."""
    session = requests.Session()
    session.trust_env = False
    url = f"http://127.0.0.1:3142/ccache/0000000000000000/reader-probe-{random.randrange(1 << 30)}"
    assert session.put(url, data=b"x", auth=_auth(READER), timeout=5).status_code == 401
    assert session.get(url, auth=_auth(READER), timeout=5).status_code == 404  # never written
    assert session.put(url, data=b"x", auth=_auth(WRITER), timeout=5).status_code == 201
    assert session.get(url, auth=_auth(READER), timeout=5).content == b"x"
    assert session.delete(url, auth=_auth(READER), timeout=5).status_code == 401
    assert session.delete(url, auth=_auth(WRITER), timeout=5).status_code == 204
    doctor = dockerarch(
        "doctor", env=config(tmp_path, "http://127.0.0.1:3142/ccache/"), timeout=300
    )
    (line,) = [x for x in doctor.stdout.splitlines() if "compiler cache" in x]
    assert line.split()[0] == "ok" and "(the server refuses the reader writes)" in line, line


HOSTILE = "dockerarch-settest-hostile"
# What a hostile sdist can do with nothing but what its build step is given: read the shared
# cache's secret and PUT an object of its choosing under a key (issue 55's attack, for real)
HOSTILE_SETUP = """\
import base64, sys, urllib.parse, urllib.request
from setuptools import Extension, setup

def poison():
    try:
        line = open("/run/secrets/dockerarch-ccache-remote").read().strip()
    except OSError as exc:
        return "no secret: %r" % exc
    parts = urllib.parse.urlsplit(line.split("|")[0])
    pair = "%s:%s" % (urllib.parse.unquote(parts.username or ""), urllib.parse.unquote(parts.password or ""))
    url = "http://%s:%s%s/0000000000000000/poison-MARK" % (parts.hostname, parts.port, parts.path)
    request = urllib.request.Request(url, data=b"poisoned", method="PUT",
                                     headers={"Authorization": "Basic " + base64.b64encode(pair.encode()).decode()})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        return opener.open(request, timeout=5).status
    except Exception as exc:
        return repr(exc)

print("hostile build: PUT answered", poison(), file=sys.stderr)
setup(ext_modules=[Extension("hostile", ["hostile.c"])])
"""
HOSTILE_C = """#include <Python.h>
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "hostile", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_hostile(void) { return PyModule_Create(&mod); }
"""


def test_a_fetched_sdists_build_cannot_write_to_the_team_cache(tmp_path: Path) -> None:
    """The same hostile project twice: fetched from an index as a set's member, its setup.py
    finds only the reader's credential and its PUT is refused (the object never exists); built
    from the user's own tree (--package DIR), it is the writer's and the PUT lands, which proves
    the attack is real and the first build really was stopped by the split."""
    from dockerarch.pipconfig import default_index

    from .settest_index import _pkg_info, _pyproject, sdist, serve

    mark = f"{random.randrange(1 << 40):x}"
    files = {"pyproject.toml": _pyproject(HOSTILE, ["setuptools"], []),
             "PKG-INFO": _pkg_info(HOSTILE, []), "setup.py": HOSTILE_SETUP.replace("MARK", mark),
             "hostile.c": HOSTILE_C}  # fmt: skip
    root = tmp_path / "index"
    (root / "files").mkdir(parents=True)
    made = sdist(root / "files", HOSTILE, files)
    page = root / "simple" / HOSTILE
    page.mkdir(parents=True)
    digest = hashlib.sha256(made.read_bytes()).hexdigest()
    (page / "index.html").write_text(
        f'<a href="../../files/{made.name}#sha256={digest}">{made.name}</a>\n'
    )
    env = config(tmp_path, "http://127.0.0.1:3142/ccache/")
    poison = f"http://127.0.0.1:3142/ccache/0000000000000000/poison-{mark}"
    session = requests.Session()
    session.trust_env = False
    (tmp_path / "r.txt").write_text(f"{HOSTILE}==1.0\n")
    with serve(root) as index:
        fetched = dockerarch("build", "wheel", "-r", str(tmp_path / "r.txt"), "--index-url", index,
                             "--extra-index-url", default_index(), "--arch", "armv7", "--out",
                             str(tmp_path / "set"), "--progress", "plain", env=env, timeout=1800)  # fmt: skip
    assert fetched.returncode == 0, fetched.stderr[-3000:]
    assert "read only for this build (not your own code" in said(fetched)
    assert session.get(poison, auth=_auth(WRITER), timeout=5).status_code == 404
    assert re.search(rf'"PUT /ccache/0+/poison-{mark} HTTP/1\.\d" 401', ACCESS_LOG.read_text())
    tree = tmp_path / "tree"
    for name, text in files.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(text)
    own = build(tree, tmp_path / "own", env)
    assert own.returncode == 0, own.stderr[-3000:]
    assert "read only for this build" not in said(own)
    assert session.get(poison, auth=_auth(WRITER), timeout=5).content == b"poisoned"
    session.delete(poison, auth=_auth(WRITER), timeout=5)

"""The shared compiler cache's configuration, credentials and pre-build check, without a server
(the server's own side is tests/integration/test_compiler_cache.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import requests

from dockerarch import compilercache
from dockerarch.config import CompilerCacheConfig, parse_registry_config
from dockerarch.errors import ConfigError

LOCAL = CompilerCacheConfig(url="http://127.0.0.1:3142/ccache/")


@pytest.fixture(autouse=True)
def _no_caller_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DOCKERARCH_CACHE_USERNAME", "DOCKERARCH_CACHE_PASSWORD"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("text", "says"),
    [("compiler_cache: {url: https://h/c/}\n", "speaks plain HTTP only"),
     ("compiler_cache: {url: ftp://h/c/}\n", "not an http:// URL"),
     ("compiler_cache: {url: 'http://u:p@h/c/'}\n", "carries credentials in the URL"),
     ("compiler_cache: {url: 'http://[::1/c/'}\n", "which is not a URL"),
     ("compiler_cache: {read_only: true}\n", "has no url"),
     ("compiler_cache: {url: http://h/c/, read_only: maybe}\n", "'compiler_cache.read_only'"),
     ("compiler_cache: {url: http://h/c/, shards: 2}\n", "Unknown key 'compiler_cache.shards'"),
     ("compiler_cache: {url: http://h/c/, writes: everyone}\n", "'compiler_cache.writes'")],
)  # fmt: skip
def test_bad_compiler_cache_sections_are_refused(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "registry.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        parse_registry_config(path)
    assert says in err.value.message and str(path) in err.value.message


def test_a_compiler_cache_section_is_read(tmp_path: Path) -> None:
    path = tmp_path / "registry.yaml"
    path.write_text("compiler_cache: {url: 'http://10.0.0.9:3142/ccache', read_only: true}\n")
    config = parse_registry_config(path).compiler_cache
    assert config == CompilerCacheConfig(url="http://10.0.0.9:3142/ccache/", read_only=True)
    assert not config.loopback and LOCAL.loopback
    assert parse_registry_config(tmp_path / "registry.yaml").farm == ()
    assert config.writes == "own"  # only builds of the user's own trees write, unless told
    (tmp_path / "none.yaml").write_text("registry: {address: 127.0.0.1:5000}\n")
    assert parse_registry_config(tmp_path / "none.yaml").compiler_cache is None


def test_credentials_come_from_the_environment_netrc_or_setup_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    (state / "ccache").mkdir(parents=True)
    (state / "ccache" / "credentials").write_text("dockerarch:from-state\n")
    (state / "ccache" / "listen").write_text("0.0.0.0:3142\n")
    monkeypatch.setattr("dockerarch.indexcreds.this_machine", lambda host: host == "127.0.0.1")
    found = compilercache.credentials(LOCAL, state_dir=state, home=tmp_path)
    assert (found.username, found.password) == ("dockerarch", "from-state")
    assert "from-state" not in repr(found) and "setup-host" in found.source
    other_port = CompilerCacheConfig(url="http://127.0.0.1:3199/ccache/")  # not setup-host's
    assert compilercache.credentials(other_port, state_dir=state, home=tmp_path).password is None
    elsewhere = CompilerCacheConfig(url="http://192.0.2.9:3142/ccache/")
    assert compilercache.credentials(elsewhere, state_dir=state, home=tmp_path).password is None
    (tmp_path / ".netrc").write_text("machine 192.0.2.9 login team password from-netrc\n")
    found = compilercache.credentials(elsewhere, state_dir=state, home=tmp_path)
    assert (found.username, found.password, found.source) == (
        "team",
        "from-netrc",
        f"{tmp_path}/.netrc",
    )
    monkeypatch.setenv("DOCKERARCH_CACHE_PASSWORD", "from-env")
    found = compilercache.credentials(elsewhere, state_dir=state, home=tmp_path)
    assert (found.username, found.password) == ("dockerarch", "from-env")


def test_the_storage_line_carries_credentials_and_attributes_for_the_secret_only() -> None:
    remote = compilercache.RemoteCache(
        CompilerCacheConfig(url="http://10.0.0.9:3142/ccache/", read_only=True, insecure=True),
        "team", "p@ss:w/rd", "env",
    )  # fmt: skip
    assert remote.storage(own_code=True) == (
        "http://team:p%40ss%3Aw%2Frd@10.0.0.9:3142/ccache"
        "|connect-timeout=1000|operation-timeout=15000|read-only"
    )
    assert "p@ss" not in repr(remote) and "p%40ss" not in repr(remote)


def test_the_writer_s_credential_reaches_only_builds_of_the_user_s_own_code() -> None:
    """A compiling step can read its secret, and an sdist's setup.py runs in it: the writer's
    credential goes only to builds of trees the user gave; a fetched sdist's build gets the
    reader's (the server refuses it writes) read-only, or no shared cache at all."""
    config = CompilerCacheConfig(url="http://127.0.0.1:3142/ccache/")
    remote = compilercache.RemoteCache(
        config, "dockerarch", "writer-pw", "env", ("reader", "reader-pw")
    )
    own = remote.storage(own_code=True)
    assert (
        own is not None
        and own.startswith("http://dockerarch:writer-pw@")
        and "read-only" not in own
    )
    fetched = remote.storage(own_code=False)
    assert fetched is not None and fetched.startswith("http://reader:reader-pw@")
    assert fetched.endswith("|read-only") and "writer-pw" not in fetched
    no_reader = compilercache.RemoteCache(config, "dockerarch", "writer-pw", "env")
    assert no_reader.storage(own_code=False) is None
    everyone = dataclasses.replace(config, writes="all")
    assert "writer-pw" in str(
        compilercache.RemoteCache(everyone, "d", "writer-pw", "env").storage(own_code=False)
    )
    anonymous = compilercache.RemoteCache(config, None, None, "none found")
    assert anonymous.storage(own_code=False) == (
        "http://127.0.0.1:3142/ccache|connect-timeout=1000|operation-timeout=15000|read-only"
    )


def test_the_reader_s_credential_comes_from_the_environment_or_setup_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("DOCKERARCH_CACHE_PASSWORD", "DOCKERARCH_CACHE_READER_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    state = tmp_path / "state"
    (state / "ccache").mkdir(parents=True)
    (state / "ccache" / "credentials").write_text("dockerarch:w\n")
    (state / "ccache" / "reader-credentials").write_text("reader:r\n")
    (state / "ccache" / "listen").write_text("127.0.0.1:3142\n")
    monkeypatch.setattr("dockerarch.indexcreds.this_machine", lambda host: host == "127.0.0.1")
    found = compilercache.credentials(LOCAL, state_dir=state, home=tmp_path)
    assert found.reader == ("reader", "r") and found.password == "w"
    monkeypatch.setenv("DOCKERARCH_CACHE_READER_PASSWORD", "r-env")
    assert compilercache.credentials(LOCAL, state_dir=state, home=tmp_path).reader == (
        "reader",
        "r-env",
    )


class Answer:
    def __init__(self, status: int | Exception) -> None:
        self.status = status
        self.asked: list[tuple[str, Any]] = []
        self.trust_env = True

    def get(self, url: str, **kwargs: Any) -> Any:
        self.asked.append((url, kwargs.get("auth")))
        if isinstance(self.status, Exception):
            raise self.status
        response = requests.Response()
        response.status_code, response.reason = self.status, "X"
        return response


@pytest.mark.parametrize("status", [404, 200])
def test_a_server_that_takes_the_credentials_is_used(
    status: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    answer = Answer(status)
    monkeypatch.setattr(compilercache.requests, "Session", lambda: answer)
    remote = compilercache.RemoteCache(LOCAL, "dockerarch", "pw", "env")
    assert compilercache.check(remote, say=pytest.fail) is remote
    assert answer.asked == [(LOCAL.url + compilercache.PROBE, ("dockerarch", "pw"))]
    assert answer.trust_env is False


def test_refused_credentials_stop_the_build_and_stay_unprinted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(compilercache.requests, "Session", lambda: Answer(401))
    remote = compilercache.RemoteCache(LOCAL, "dockerarch", "wrong-secret", "env")
    with pytest.raises(compilercache.CompilerCacheError) as err:
        compilercache.check(remote, say=pytest.fail)
    assert "refused this machine's credentials (401" in err.value.problem
    assert "--no-compiler-cache" in err.value.fix and "wrong-secret" not in err.value.render()


def test_a_server_that_does_not_answer_is_said_and_the_build_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(compilercache.requests, "Session",
                        lambda: Answer(requests.ConnectionError("refused")))  # fmt: skip
    said: list[str] = []
    assert (
        compilercache.check(compilercache.RemoteCache(LOCAL, None, None, "none"), said.append)
        is None
    )
    assert said == [f"compiler cache: {LOCAL.url} does not answer (ConnectionError): compiling "
                    "with this machine's cache only"]  # fmt: skip


def test_credentials_never_cross_a_network_in_clear_text_unless_said(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answer = Answer(404)
    monkeypatch.setattr(compilercache.requests, "Session", lambda: answer)
    lan = CompilerCacheConfig(url="http://10.0.0.9:3142/ccache/")
    with pytest.raises(compilercache.CompilerCacheError, match="clear text"):
        compilercache.check(compilercache.RemoteCache(lan, "team", "pw", "env"), say=pytest.fail)
    assert answer.asked == []  # refused before anything was sent
    said = CompilerCacheConfig(url=lan.url, insecure=True)
    assert compilercache.check(compilercache.RemoteCache(said, "team", "pw", "env"), pytest.fail)


class Writes:
    """A server stand-in answering PUT with ``status`` and recording PUT and DELETE."""

    def __init__(self, status: int) -> None:
        self.status, self.asked, self.trust_env = status, [], True  # type: int, list[tuple[str, Any]], bool

    def put(self, url: str, **kwargs: Any) -> Any:
        self.asked.append(("PUT", kwargs.get("auth")))
        response = requests.Response()
        response.status_code = self.status
        return response

    def delete(self, url: str, **kwargs: Any) -> Any:
        self.asked.append(("DELETE", kwargs.get("auth")))
        return requests.Response()


@pytest.mark.parametrize(
    ("status", "writes"), [(401, False), (403, False), (201, True), (204, True)]
)
def test_doctor_finds_a_server_that_lets_the_reader_write(
    status: int, writes: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A team's own server configured without the split: the reader's PUT is taken, so any
    fetched sdist's build could poison the cache. The probe object goes again, with the writer's."""
    server = Writes(status)
    monkeypatch.setattr(compilercache.requests, "Session", lambda: server)
    remote = compilercache.RemoteCache(LOCAL, "dockerarch", "w", "env", ("reader", "r"))
    assert compilercache.reader_may_write(remote) is writes
    assert server.asked[0] == ("PUT", ("reader", "r")) and server.trust_env is False
    assert server.asked[1:] == ([("DELETE", ("dockerarch", "w"))] if writes else [])
    assert compilercache.reader_may_write(compilercache.RemoteCache(LOCAL, "d", "w", "env")) is None

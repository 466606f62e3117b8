"""The private interfaces of other packages dockerarch still relies on, pinned to exact versions in
pyproject.toml: each test here fails when a new version moves what dockerarch reaches into, so
an upgrade is a decision, never a surprise in a user's push.

- oras-py (the registry client): ``Registry.do_request.__wrapped__`` (one try of its request,
  without its own retry decorator: registry.RETRIES is the policy) and ``BasicAuth._basic_auth``
  (what it found in docker's store: nothing there for a basic-auth registry means nobody logged
  in).
- python-on-whales (the Docker client): buildx's module streams a build's output through the
  name ``stream_stdout_and_stderr`` it imported from its utils, which dockerarch replaces with
  its own linear one (engine.stream_stdout_and_stderr; upstream's copies the whole log for each
  line), raising the exception ``utils.get_docker_exception_type`` picks.
- pip (the host's, and Debian's in the toolchain stage, which the base pins):
  ``pip._internal.models.index.PyPI``, pip's default index, which dockerarch never writes.
"""

from __future__ import annotations

import base64
import inspect
import json
from importlib.metadata import version
from pathlib import Path

import pytest

import dockerarch
from dockerarch.paths import data_path
from dockerarch.pipconfig import PipConfig, default_index, for_builds

PYPROJECT = Path(dockerarch.__file__).parents[1] / "pyproject.toml"


def test_oras_is_pinned_to_the_version_these_tests_read() -> None:
    assert '"oras==0.2.43"' in PYPROJECT.read_text()
    assert version("oras") == "0.2.43"


def test_python_on_whales_is_pinned_and_buildx_streams_through_the_replaced_name() -> None:
    from python_on_whales import utils
    from python_on_whales.components.buildx import cli_wrapper

    assert '"python-on-whales==0.81.0"' in PYPROJECT.read_text()
    assert version("python-on-whales") == "0.81.0"
    # build(stream_logs=True) -> stream_buildx_logs -> the module-level name dockerarch replaces
    assert "stream_buildx_logs(full_cmd" in inspect.getsource(cli_wrapper.BuildxCLI.build)
    assert "stream_stdout_and_stderr(full_cmd, env=env)" in inspect.getsource(
        cli_wrapper.stream_buildx_logs
    )
    upstream = inspect.signature(utils.stream_stdout_and_stderr)
    assert list(upstream.parameters) == ["full_cmd", "env", "pass_fds"]
    assert list(inspect.signature(utils.get_docker_exception_type).parameters) == ["output"]


def test_oras_one_try_of_a_request_is_its_wrapped_do_request() -> None:
    from oras.provider import Registry

    single = Registry.do_request.__wrapped__  # under oras' own retry decorator
    assert list(inspect.signature(single).parameters)[:5] == [
        "self", "url", "method", "data", "headers"]  # fmt: skip


def test_oras_keeps_docker_s_stored_login_as_basic_auth(tmp_path: Path) -> None:
    from oras.container import Container
    from oras.provider import Registry

    token = base64.b64encode(b"user:secret").decode()
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"auths": {"127.0.0.1:5999": {"auth": token}}}))
    registry = Registry(hostname="127.0.0.1:5999", insecure=True, auth_backend="basic")
    registry.auth.load_configs(Container("127.0.0.1:5999/ns/x"), configs=[str(config)])
    assert registry.auth._basic_auth == token
    nobody = Registry(hostname="127.0.0.1:5998", insecure=True, auth_backend="basic")
    nobody.auth.load_configs(Container("127.0.0.1:5998/ns/x"), configs=[str(config)])
    assert not getattr(nobody.auth, "_basic_auth", None)


def test_pip_s_default_index_is_where_dockerarch_reads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """pip's built-in default index (private: pip has no API) is the one value dockerarch takes
    from pip's code; builds in the engine are given it (pipconfig.for_builds), fetch-sdist reads
    no pip of its own."""
    from pip._internal.models.index import PyPI

    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    assert default_index() == PyPI.simple_url
    assert for_builds(PipConfig()).index_url == PyPI.simple_url
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple/")
    assert default_index() == "http://127.0.0.1:9/simple/"
    assert "pip._internal" not in data_path("toolchain", "fetch-sdist").read_text()

"""Publishing without a registry: the index's shape, the retry policy, refusals, board hints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests

from dockerarch import publish, registry
from dockerarch.config import RegistryConfig, load_registry_config
from dockerarch.errors import ConfigError, UsageError
from dockerarch.render import plan

DOCKER = registry.DOCKER_MANIFEST


def child(digest: str, media_type: str = DOCKER) -> registry.Descriptor:
    return registry.Descriptor(media_type=media_type, digest=digest, size=1234)


def test_index_lists_each_platform_with_its_variant() -> None:
    data, media_type = publish.make_index(
        [
            (child("sha256:" + "a" * 64), "linux/arm/v7"),
            (child("sha256:" + "b" * 64), "linux/arm64"),
        ]
    )
    assert media_type == registry.DOCKER_LIST
    index = json.loads(data)
    assert index["mediaType"] == registry.DOCKER_LIST and index["schemaVersion"] == 2
    assert [c["platform"] for c in index["manifests"]] == [
        {"architecture": "arm", "os": "linux", "variant": "v7"},
        {"architecture": "arm64", "os": "linux"},
    ]
    assert [c["digest"] for c in index["manifests"]] == ["sha256:" + "a" * 64, "sha256:" + "b" * 64]
    manifest = registry.Manifest(media_type=media_type, digest=registry.digest_of(data), data=data)
    assert manifest.platforms() == ["linux/arm/v7", "linux/arm64"]


def test_index_of_oci_children_is_an_oci_index() -> None:
    _, media_type = publish.make_index(
        [(child("sha256:" + "c" * 64, registry.OCI_MANIFEST), "linux/arm64")]
    )
    assert media_type == registry.OCI_INDEX


def test_two_targets_of_one_platform_are_refused() -> None:
    requests_ = plan("wheel", arch=None, target="rpi3,pynq-z1", version=None,
                     package="zstandard==0.23.0", settings={})  # fmt: skip
    with pytest.raises(UsageError) as err:
        publish.check_platforms(requests_)
    assert "rpi3 and pynq-z1 are both linux/arm/v7" in str(err.value)
    assert "--index-tag 0.23.0-pynq-z1" in str(err.value)
    publish.check_platforms(plan("wheel", arch="armv7,aarch64", target=None, version=None,
                                 package="zstandard==0.23.0", settings={}))  # fmt: skip


def test_retry_policy_retries_transient_failures_only(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(registry.time, "sleep", slept.append)
    said: list[str] = []
    calls = iter([requests.ConnectionError("Connection reset by peer"),
                  registry.TransientStatus(503, "Service Unavailable"), "done"])  # fmt: skip

    def attempt() -> str:
        value = next(calls)
        if isinstance(value, Exception):
            raise value
        return value

    policy = registry.RetryPolicy()
    assert policy.run("x", attempt, transient=registry.is_transient, on_retry=said.append) == "done"
    assert slept == [1.0, 3.0] and len(said) == 2 and "trying again in 1 s" in said[0]

    def refused() -> str:
        raise requests.ConnectionError("[Errno 111] Connection refused")

    slept.clear()
    with pytest.raises(requests.ConnectionError):
        policy.run("x", refused, transient=registry.is_transient)
    assert slept == []  # nothing listens: no point waiting

    def always() -> str:
        raise registry.TransientStatus(502, "Bad Gateway")

    with pytest.raises(registry.TransientStatus):
        policy.run("x", always, transient=registry.is_transient)
    assert slept == [1.0, 3.0, 9.0] and policy.tries == 4


@pytest.mark.parametrize(
    ("text", "transient"),
    [
        ('Put "http://r/v2/x/blobs/uploads/1": write tcp: connection reset by peer', True),
        ('Get "http://r/v2/": EOF', True),
        ("received unexpected HTTP status: 503 Service Unavailable", True),
        ("toomanyrequests: 429 Too Many Requests", True),
        ("dial tcp 127.0.0.1:9: connect: connection refused", False),
        ("no basic auth credentials", False),
        ("denied: requested access to the resource is denied", False),
    ],
)
def test_transient_docker_messages(text: str, transient: bool) -> None:
    assert registry.transient_text(text) is transient


def test_board_lines_say_what_a_board_needs(tmp_path: Path) -> None:
    done = publish.Published(repository="lab.example.invalid:5000/dockerarch/zstandard",
                             tags=("0.23.0",), digest="sha256:" + "d" * 64,
                             platforms=("linux/arm/v7",))  # fmt: skip
    lab = RegistryConfig(address="lab.example.invalid:5000", insecure=True)
    lines = publish.board_lines(done, lab)
    assert (
        lines[0] == "on a board:  docker pull lab.example.invalid:5000/dockerarch/zstandard:0.23.0"
    )
    assert '{"insecure-registries": ["lab.example.invalid:5000"]}' in lines[1]
    local = publish.board_lines(done, RegistryConfig())
    assert "loopback, which no board reaches" in local[1]
    ca = tmp_path / "ca.pem"
    tls = publish.board_lines(
        done, RegistryConfig(address="lab.example.invalid", insecure=False, ca=ca)
    )
    assert "/etc/docker/certs.d/lab.example.invalid/ca.crt" in tls[1]


def test_registry_ca_is_checked(tmp_path: Path) -> None:
    path = tmp_path / "registry.yaml"
    path.write_text("registry:\n  address: 127.0.0.1:5443\n  insecure: false\n  ca: ca.pem\n")
    with pytest.raises(ConfigError, match="not a file"):
        load_registry_config(path)
    (tmp_path / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    assert load_registry_config(path).ca == tmp_path / "ca.pem"
    path.write_text("registry:\n  address: 127.0.0.1:5443\n  ca: ca.pem\n")  # insecure by default
    with pytest.raises(ConfigError, match="contradict each other"):
        load_registry_config(path)


def test_login_hint_takes_the_password_on_stdin() -> None:
    hint = registry.login_hint("127.0.0.1:5443")
    assert "--password-stdin" in hint and "--password " not in hint

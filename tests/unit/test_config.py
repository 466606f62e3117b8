from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from dockerarch.config import RegistryConfig, load_registry_config, parse_registry_config
from dockerarch.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def test_repository_registry_yaml_loads() -> None:
    config = load_registry_config(REPO / "registry.yaml")
    assert config.address == "127.0.0.1:5000"
    # One package index per board target, on the devpi-server that scripts/setup-host runs.
    assert config.index.upload_url("rpi3") == "http://127.0.0.1:3141/dockerarch/rpi3/"
    assert config.index.simple_url("rpi3") == "http://127.0.0.1:3141/dockerarch/rpi3/+simple/"
    assert config.index == RegistryConfig().index and config.index.loopback
    assert config.api_url == "http://127.0.0.1:5000/v2/"
    assert config.cache is False  # the registry cache is asked for, not assumed


def test_defaults_without_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DOCKERARCH_REGISTRY_CONFIG", raising=False)
    assert load_registry_config() == RegistryConfig()


def test_machine_images_are_pulled_from_the_registry_unless_it_says_otherwise(
    tmp_path: Path,
) -> None:
    from dockerarch import machineimages

    path = tmp_path / "r.yaml"
    path.write_text("registry:\n  address: registry.example.invalid:5000\n  namespace: team/ci\n")
    config = parse_registry_config(path)
    found = machineimages.sharing(config)
    assert found == machineimages.Sharing(config, push=False)
    assert found.prefix == "registry.example.invalid:5000/team/ci"
    assert found.repository("dockerarch/toolchain:x-1") == ("team/ci/toolchain", "x-1")
    assert (
        found.remote("dockerarch/toolchain:x-1")
        == "registry.example.invalid:5000/team/ci/toolchain:x-1"
    )
    path.write_text("registry:\n  machine_images: push\n")
    pushing = dataclasses.replace(parse_registry_config(path), address="h", namespace="n")
    assert machineimages.sharing(pushing) == machineimages.Sharing(pushing, push=True)
    assert machineimages.Sharing(pushing).prefix == "h/n"
    path.write_text("registry:\n  machine_images: off\n")  # YAML's false, as written
    assert parse_registry_config(path).machine_images == "off"
    assert machineimages.sharing(RegistryConfig(machine_images="off")) is None


def test_env_points_at_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "r.yaml"
    path.write_text("registry:\n  address: registry.example.invalid:443\n  insecure: false\n")
    monkeypatch.setenv("DOCKERARCH_REGISTRY_CONFIG", str(path))
    config = load_registry_config()
    assert config.api_url == "https://registry.example.invalid:443/v2/"
    assert config.source == str(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("registry:\n  adress: x:1\n", "Unknown key 'registry.adress'"),
        ("registri: {}\n", "Unknown key 'registri'"),
        ("registry:\n  address: 'a b'\n", "not HOST or HOST:PORT"),
        ("registry:\n  insecure: maybe\n", "must be true or false"),
        ("registry:\n  namespace: Upper/Case\n", "not a valid repository path"),
        ("registry:\n  cache: yes please\n", "'registry.cache' in"),
        ("registry:\n  machine_images: share\n", "is 'share', not one of pull, push, off"),
        ("registry: [1, 2]\n", "must be a mapping"),
        ("registry:\n  address: [\n", ":3 is not valid YAML"),
        ("registry:\n  address: 127.0.0.1:70000\n", "has port 70000, which no TCP port is"),
        ("registry:\n  address: 127.0.0.1:0\n", "has port 0, which no TCP port is"),
        ("index:\n  urll: x\n", "Unknown key 'index.urll'"),
        ("index:\n  url: ftp://h/{target}/\n  simple: http://h/{target}/\n", "not an http://"),
        ("index:\n  url: http://h/all/\n  simple: http://h/{target}/\n", "has no {target}"),
        (
            "index:\n  url: http://u:pw@h/{target}/\n  simple: http://h/{target}/simple/\n",
            "carries credentials in the URL",
        ),
        (
            "index:\n  url: http://h:99999/{target}/\n  simple: http://h/{target}/simple/\n",
            "has a port no TCP port is",
        ),
        ("index:\n  url: http://h/{target}/\n", "'index.simple' is not"),
        (
            "index:\n  url: 'http://[::1/x/{target}/'\n  simple: 'http://[::1/x/{target}/+simple/'\n",
            "which is not a URL: Invalid IPv6 URL",
        ),
        ("index:\n  ca: ca.pem\n", "plain-HTTP index"),
        ("index:\n  insecure: sure\n", "'index.insecure' in"),
        (
            "index:\n  url: https://h/{target}/\n  simple: https://h/{target}/simple/\n  insecure: true\n",
            "is set for an https:// index",
        ),
    ],
)
def test_bad_files_are_rejected(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "registry.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_registry_config(path)
    assert message in caught.value.message
    assert str(path) in caught.value.message


def test_a_file_that_is_not_utf8_is_named_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "registry.yaml"
    path.write_bytes(b"registry:\n  address: caf\xe9:5000\n")  # Latin-1
    with pytest.raises(ConfigError) as caught:
        load_registry_config(path)
    assert caught.value.problem == (
        f"{path} is not UTF-8 text: byte 0xe9 on line 2 is not valid UTF-8"
    )
    assert "UTF-8" in (caught.value.fix or "")


def test_the_environment_naming_a_directory_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKERARCH_REGISTRY_CONFIG", str(tmp_path))
    with pytest.raises(ConfigError) as caught:
        load_registry_config()
    assert caught.value.problem == (
        f"{tmp_path} (named by $DOCKERARCH_REGISTRY_CONFIG) is a directory, not a registry "
        "configuration file"
    )
    assert str(tmp_path / "registry.yaml") in (caught.value.fix or "")


def test_missing_explicit_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_registry_config(tmp_path / "nope.yaml")


@pytest.mark.parametrize(
    ("address", "loopback"),
    [("127.0.0.1:5000", True), ("localhost:5000", True), ("localhost", True),
     ("127.5.0.1:5000", True), ("127.example.invalid:5000", False),
     ("registry.example.invalid:443", False), ("10.0.0.7:5000", False)],
)  # fmt: skip
def test_registry_cache_repository(tmp_path: Path, address: str, loopback: bool) -> None:
    path = tmp_path / "registry.yaml"
    path.write_text(f"registry:\n  address: '{address}'\n  namespace: team/arm\n  cache: true\n")
    config = load_registry_config(path)
    assert config.cache is True
    assert config.cache_repository == f"{address}/team/arm/buildcache"
    assert config.loopback is loopback


def test_builtin_defaults_are_the_shipped_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a registry.yaml the configuration is dockerarch/data/registry.yaml, which the
    wheel ships; it says the same as the repository's own registry.yaml."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DOCKERARCH_REGISTRY_CONFIG", raising=False)
    config = load_registry_config()
    assert config.source == "built-in defaults"
    repo = load_registry_config(REPO / "registry.yaml")
    assert dataclasses.replace(repo, source="built-in defaults") == config


def test_an_index_elsewhere(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    path = tmp_path / "registry.yaml"
    path.write_text("index:\n  url: https://nexus.example.invalid/repository/{target}\n"
                    "  simple: https://nexus.example.invalid/repository/{target}/simple/\n"
                    "  ca: ca.pem\n")  # fmt: skip
    index = load_registry_config(path).index
    assert index.upload_url("pynq-zu") == "https://nexus.example.invalid/repository/pynq-zu/"
    assert index.ca == tmp_path / "ca.pem" and not index.loopback
    assert index.server == "https://nexus.example.invalid"


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.1.2.3", True), ("localhost", True), ("LOCALHOST", True),
     ("::1", True), ("[::1]", True), ("127.example.invalid", False), ("localhost.example.invalid", False),
     ("10.0.0.5", False), ("::", False), ("", False)],
)  # fmt: skip
def test_one_definition_of_loopback(host: str, loopback: bool) -> None:
    # registry, index, farm server and the board lines all ask this one function
    from dockerarch.config import FarmServer, IndexConfig, is_loopback

    assert is_loopback(host) is loopback
    if host and ":" not in host.strip("[]"):
        assert FarmServer(host).loopback is loopback
        url = f"http://{host}:3141/x/{{target}}/"
        assert IndexConfig(url=url, simple=url + "+simple/").simple_loopback is loopback

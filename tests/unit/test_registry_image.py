"""An image in a registry as its manifest and config say (RegistryClient.image): what a
machine's first build checks a team's toolchain image by before the build pulls it by digest.
Against a stand-in for the registry's answers: every answer is checked against the digest asked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from dockerarch import registry
from dockerarch.config import RegistryConfig

KEY = "org.dockerarch.machine-image.key"


@dataclass
class Answer:
    status_code: int
    content: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    reason: str = ""

    @property
    def text(self) -> str:
        return self.content.decode(errors="replace")


def config_blob(labels: dict[str, str], architecture: str = "amd64") -> bytes:
    return json.dumps({"os": "linux", "architecture": architecture,
                       "config": {"Labels": labels}}).encode()  # fmt: skip


def image_manifest(config: bytes) -> bytes:
    return json.dumps({"schemaVersion": 2, "mediaType": registry.DOCKER_MANIFEST,
                       "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                                  "digest": registry.digest_of(config), "size": len(config)},
                       "layers": []}).encode()  # fmt: skip


class Registry:
    """Paths under /v2/ -> (media type, bytes); ``lie`` maps a path to other bytes served."""

    def __init__(self) -> None:
        self.stored: dict[str, tuple[str, bytes]] = {}
        self.lie: dict[str, bytes] = {}
        self.asked: list[str] = []

    def put(self, path: str, data: bytes, media_type: str = "application/octet-stream") -> str:
        self.stored[path] = (media_type, data)
        return registry.digest_of(data)

    def request(self, what: str, method: str, path: str, *, headers: dict[str, str] | None = None,
                data: bytes | None = None) -> Answer:  # fmt: skip
        self.asked.append(path)
        if path not in self.stored:
            return Answer(404, b"not found")
        media_type, body = self.stored[path]
        return Answer(200, self.lie.get(path, body), {"Content-Type": media_type})


@pytest.fixture
def team(monkeypatch: pytest.MonkeyPatch) -> tuple[registry.RegistryClient, Registry]:
    fake = Registry()
    client = registry.RegistryClient(RegistryConfig(address="registry.example.invalid:5000"))
    monkeypatch.setattr(client, "_request", fake.request)
    return client, fake


def test_an_image_s_digest_labels_and_platform_come_from_its_manifest_and_config(
    team: tuple[registry.RegistryClient, Registry],
) -> None:
    client, fake = team
    config = config_blob({KEY: "a" * 64})
    fake.put(f"team/toolchain/blobs/{registry.digest_of(config)}", config)
    digest = fake.put(
        "team/toolchain/manifests/x-1", image_manifest(config), registry.DOCKER_MANIFEST
    )
    found = client.image("team/toolchain", "x-1", "linux/amd64")
    assert found == registry.RemoteImage(digest=digest, labels={KEY: "a" * 64},
                                         platform="linux/amd64")  # fmt: skip
    assert client.image("team/toolchain", "x-2", "linux/amd64") is None  # no such tag


def test_an_index_gives_its_child_for_the_platform(
    team: tuple[registry.RegistryClient, Registry],
) -> None:
    client, fake = team
    children = []
    for arch, variant in (("arm", "v7"), ("arm64", "v8")):
        config = config_blob({KEY: arch * 4}, arch)
        fake.put(f"team/img/blobs/{registry.digest_of(config)}", config)
        data = image_manifest(config)
        digest = fake.put(f"team/img/manifests/{registry.digest_of(data)}", data,
                          registry.DOCKER_MANIFEST)  # fmt: skip
        children.append({"mediaType": registry.DOCKER_MANIFEST, "digest": digest,
                         "size": len(data), "platform": {"os": "linux", "architecture": arch,
                                                          "variant": variant}})  # fmt: skip
    index = json.dumps({"schemaVersion": 2, "mediaType": registry.DOCKER_LIST,
                        "manifests": children}).encode()  # fmt: skip
    fake.put("team/img/manifests/both", index, registry.DOCKER_LIST)
    found = client.image("team/img", "both", "linux/arm64")
    assert found is not None and found.digest == children[1]["digest"]
    assert found.labels == {KEY: "arm64" * 4} and found.platform == "linux/arm64"
    assert client.image("team/img", "both", "linux/amd64") is None  # no child for it
    # a child answered with other bytes than its digest names: refused, not taken
    fake.lie[f"team/img/manifests/{children[0]['digest']}"] = image_manifest(config_blob({}))
    with pytest.raises(registry.RegistryError, match="answered a manifest whose digest is"):
        client.image("team/img", "both", "linux/arm/v7")


def test_a_config_that_is_not_what_its_digest_names_is_refused(
    team: tuple[registry.RegistryClient, Registry],
) -> None:
    client, fake = team
    config = config_blob({KEY: "a" * 64})
    path = f"team/toolchain/blobs/{registry.digest_of(config)}"
    fake.put(path, config)
    fake.put("team/toolchain/manifests/x-1", image_manifest(config), registry.DOCKER_MANIFEST)
    fake.lie[path] = config_blob({KEY: "b" * 64})  # the key the build wants, say
    with pytest.raises(registry.RegistryError, match="that are not sha256:"):
        client.image("team/toolchain", "x-1", "linux/amd64")
    # a manifest with no config: not an image
    fake.put("team/toolchain/manifests/x-2", json.dumps({"schemaVersion": 2}).encode(),
             registry.OCI_MANIFEST)  # fmt: skip
    with pytest.raises(registry.RegistryError, match="is not an image"):
        client.image("team/toolchain", "x-2", "linux/amd64")

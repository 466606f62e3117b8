"""A builder node's ssh host key: pinned only when the user named it, refused when it changed."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from types import SimpleNamespace

import pytest

from dockerarch import builders, hostkeys
from dockerarch.buildsteps import bases, state
from dockerarch.errors import EngineError, UsageError

# two made-up ed25519 public key blobs (the key type string, then 32 bytes)
ED_A = base64.b64encode(b"\0\0\0\x0bssh-ed25519\0\0\0\x20" + bytes(range(32))).decode()
ED_B = base64.b64encode(b"\0\0\0\x0bssh-ed25519\0\0\0\x20" + bytes(range(1, 33))).decode()
A = hostkeys.HostKey("ssh-ed25519", ED_A)
B = hostkeys.HostKey("ssh-ed25519", ED_B)


def test_a_fingerprint_is_openssh_s_sha256_form() -> None:
    digest = hashlib.sha256(base64.b64decode(ED_A)).digest()
    assert A.fingerprint == "SHA256:" + base64.b64encode(digest).decode().rstrip("=")
    assert "=" not in A.fingerprint and A.fingerprint != B.fingerprint


def test_keyscan_and_known_hosts_lines_give_their_keys() -> None:
    scanned = (
        f"# 127.0.0.1:2222 SSH-2.0-OpenSSH_9.2p1 Debian-2\n[127.0.0.1]:2222 ssh-ed25519 {ED_A}\n"
    )
    assert hostkeys.parse_keys(scanned) == [A]
    known = (
        f"# Host [127.0.0.1]:2222 found: line 3\n|1|c2FsdA==|aGFzaA== ssh-ed25519 {ED_B}\n"
        f"@revoked * ssh-ed25519 {ED_A}\nbroken ssh-rsa not-base64!\n"
    )
    assert hostkeys.parse_keys(known) == [B]


def test_ssh_s_own_configuration_says_where_and_which_file(tmp_path: Path) -> None:
    text = "user pi\nhostname 127.0.0.1\nport 2222\nuserknownhostsfile /h/.ssh/kh /h/.ssh/kh2\n"
    place = hostkeys.parse_ssh_config(text)
    assert (place.hostname, place.port, place.known_hosts) == (
        "127.0.0.1",
        2222,
        Path("/h/.ssh/kh"),
    )
    assert place.name == "[127.0.0.1]:2222"
    assert hostkeys.SshPlace("graviton.example.org", 22, tmp_path).name == "graviton.example.org"


def test_an_unknown_key_is_pinned_only_when_the_user_named_it() -> None:
    with pytest.raises(UsageError) as unnamed:
        hostkeys.decide("[127.0.0.1]:2222", [A], [], None)
    text = unnamed.value.problem + unnamed.value.fix
    assert "does not trust a key on first use" in text and A.fingerprint in text
    assert "--host-key" in text and "ssh host keys made" in text
    assert hostkeys.decide("[127.0.0.1]:2222", [B, A], [], A.fingerprint) == A
    with pytest.raises(UsageError, match="is not a key"):
        hostkeys.decide("[127.0.0.1]:2222", [A], [], B.fingerprint)


def test_a_known_key_is_kept_and_a_changed_one_refused() -> None:
    assert hostkeys.decide("n", [A], [A], None) is None
    assert hostkeys.decide("n", [A], [A], A.fingerprint) is None
    with pytest.raises(UsageError) as changed:
        hostkeys.decide("n", [B], [A], B.fingerprint)  # naming the new key does not override
    assert "other than the one your known_hosts holds" in changed.value.problem
    assert "ssh-keygen -R 'n'" in changed.value.fix


def test_a_host_key_for_a_node_not_reached_over_ssh_is_a_user_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(builders, "_contexts", lambda: [])
    with pytest.raises(UsageError, match="--host-key is for ssh:// nodes"):
        builders.add("n1", ["linux/arm64"], "tcp://127.0.0.1:2375", host_key=A.fingerprint)


def test_an_engine_older_than_named_build_contexts_cannot_be_a_node() -> None:
    """Debian 12's docker.io (20.10, BuildKit 0.8) met on a real arm64 node: its BuildKit
    refuses named build contexts, which every build passes. Said by version, before a build."""
    assert builders.too_old("20.10.24+dfsg1") and "20.10.24+dfsg1" in builders.too_old(
        "20.10.24+dfsg1"
    )  # type: ignore[operator]
    assert builders.too_old("22.06.0-beta.0") is not None
    assert builders.too_old("23.0.0") is None and builders.too_old("26.1.5+dfsg1") is None
    assert builders.too_old("") is None  # no version: the engine's own error says more


def test_a_platform_the_node_s_buildkit_does_not_list_is_not_served() -> None:
    arm64_only = ("linux/arm64", "linux/amd64")  # an arm64 kernel without 32-bit support, say
    assert builders.unserved(("linux/arm64", "linux/arm/v7"), arm64_only) == ["linux/arm/v7"]
    assert builders.unserved(("linux/arm64",), arm64_only) == []


def test_a_node_that_stops_answering_mid_build_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    node = builders.Route(builder="armnode", context="armnode", endpoint="ssh://pi@127.0.0.1:2259",
                          accel="native")  # fmt: skip
    job = SimpleNamespace(route=node, target="debian-aarch64")
    monkeypatch.setattr(builders, "answers", lambda n: "ssh: connect to host 127.0.0.1 port 2259: Connection refused")  # fmt: skip
    lost = state._node_lost(job, "compiling zstandard")  # type: ignore[arg-type]
    assert lost is not None and lost.exit_code == 6
    assert (
        "builder node 'armnode' (ssh://pi@127.0.0.1:2259) stopped answering while compiling"
        in lost.problem
    )
    assert "run the same command again" in lost.fix and "--builder local" in lost.fix
    monkeypatch.setattr(builders, "answers", lambda n: None)  # it answers: buildx was stopped
    assert state._node_lost(job, "compiling zstandard") is None  # type: ignore[arg-type]
    assert state._node_lost(job, "compiling zstandard", -2) is None  # type: ignore[arg-type]
    cancelled = "ERROR: failed to solve: Canceled: context canceled"
    assert state._node_lost(job, "compiling zstandard", 1, cancelled) is None  # type: ignore[arg-type]


def test_a_connection_to_a_node_that_drops_mid_build_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Seen on a real arm64 node (bench/arm_node): its sshd's session ended mid-compile, the node
    still up; buildx ended with exit code 1 and no step failed."""
    node = builders.Route(builder="armnode", context="armnode", endpoint="ssh://pi@127.0.0.1:2259",
                          accel="native")  # fmt: skip
    job = SimpleNamespace(route=node, target="debian-aarch64")
    monkeypatch.setattr(builders, "answers", lambda n: None)
    said = ("ERROR: failed to receive status: rpc error: code = Unavailable desc = error reading "
            "from server: command [ssh -o ConnectTimeout=30 -l pi -p 2259 -- 127.0.0.1 docker "
            "system dial-stdio] has exited with exit status 255")  # fmt: skip
    lost = state._node_lost(job, "compiling zstandard with pip", 1, said)  # type: ignore[arg-type]
    assert lost is not None and lost.exit_code == 6
    assert (
        "the connection to builder node 'armnode' (ssh://pi@127.0.0.1:2259) dropped while "
        "compiling zstandard with pip"
        in lost.problem
        and "exit status 255" in lost.problem
    )
    assert "in its cache" in lost.fix and "--builder local" in lost.fix
    here = SimpleNamespace(route=builders.Route(builder="local", context=None, endpoint="unix:///x",
                                                accel="qemu"), target="debian-aarch64")  # fmt: skip
    assert state._node_lost(here, "compiling") is None  # type: ignore[arg-type]


def test_a_full_disk_names_where_and_what_to_prune() -> None:
    node = SimpleNamespace(route=builders.Route(builder="armnode", context="armnode",
                                                endpoint="ssh://pi@127.0.0.1:2259", accel="native"),
                           target="debian-aarch64")  # fmt: skip
    full = state.disk_full(node, "[build 4/6] RUN pip wheel")  # type: ignore[arg-type]
    assert "builder node 'armnode' (ssh://pi@127.0.0.1:2259) ran out of disk" in full.problem
    assert "docker builder prune" in full.fix and "builder rm armnode" in full.fix
    here = SimpleNamespace(route=builders.Route(builder="local", context=None, endpoint="unix:///x",
                                                accel="qemu"), target="debian-aarch64")  # fmt: skip
    assert "this machine's Docker engine ran out of disk" in state.disk_full(here, "x").problem  # type: ignore[arg-type]


def test_a_node_whose_disk_cannot_take_the_base_is_said_to_be_full() -> None:
    """The first build on a node copies the target's base there (docker save | load): a full
    disk fails the load, before any build step."""

    class Engine:
        def image_labels(self, tag: str, context: str | None = None) -> None:
            return None

        def copy_image(self, tag: str, context: str) -> None:
            raise EngineError(f"Copying {tag} to builder node '{context}' failed: write "
                              "/var/lib/docker/tmp/docker-import-1/layer.tar: no space left on "
                              "device")  # fmt: skip

    said: list[str] = []
    job = SimpleNamespace(
        route=builders.Route(builder="armnode", context="armnode",
                             endpoint="ssh://pi@127.0.0.1:2259", accel="native"),
        target="debian-aarch64", engine=Engine(), say=said.append, base_id=None,
        source_date_epoch=None,
        request=SimpleNamespace(target=SimpleNamespace(base_image="dockerarch/base/debian-aarch64:bookworm")),
    )  # fmt: skip
    with pytest.raises(state.DiskFull) as full:
        bases._take_base(job, "sha256:b", {})  # type: ignore[arg-type]
    assert (
        "builder node 'armnode' (ssh://pi@127.0.0.1:2259) ran out of disk (no space left on "
        "device) at copying the base dockerarch/base/debian-aarch64:bookworm" in full.value.problem
    )
    assert "docker image prune" in full.value.fix


def test_a_session_the_node_lost_before_handing_the_result_over_is_named() -> None:
    """Seen on a real node frozen for an hour mid-compile: the compiles finished, the export then
    failed with BuildKit's "no active session ...: context deadline exceeded"."""
    node = SimpleNamespace(route=builders.Route(builder="armnode", context="armnode",
                                                endpoint="ssh://pi@127.0.0.1:2259", accel="native"),
                           target="debian-aarch64")  # fmt: skip
    lost = state._session_lost(node, "exporting to client directory")  # type: ignore[arg-type]
    assert "connection to builder node 'armnode' (ssh://pi@127.0.0.1:2259) was lost" in lost.problem
    assert "in its cache" in lost.fix and lost.exit_code == 6


def test_the_manifest_says_which_kernel_ran_the_target_s_code_itself() -> None:
    info = {"architecture": "aarch64", "kernel": "6.12.117+deb13-arm64", "engine": "26.1.5",
            "os": "Debian GNU/Linux 13 (trixie)"}  # fmt: skip
    assert builders.machine(info, "aarch64")["native"] is True
    assert builders.machine(info, "armv7")["native"] is True  # compat: seen on a real node
    here = {**info, "architecture": "x86_64"}
    assert builders.machine(here, "aarch64")["native"] is False
    assert builders.machine(here, "armv7")["native"] is False
    assert builders.machine(here, "amd64")["native"] is True
    pi = {**info, "architecture": "armv7l"}
    assert builders.machine(pi, "armv7")["native"] is True
    assert builders.machine(pi, "aarch64")["native"] is False
    assert builders.machine({"error": "down"}, "armv7") == {"error": "down"}

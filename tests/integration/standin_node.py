"""A second Docker engine standing in for a native ARM builder node.

It runs in a network namespace of its own, joined to the host by a veth pair and NATed out, so it
gets its own docker0 bridge for RUN steps. Sharing the host's network namespace does not work: a
second dockerd there either cannot make a bridge (`--bridge none` then fails every RUN step with
"network bridge not found") or deletes the main daemon's docker0 when it starts or stops.
The namespace is entered with nsenter, not `ip netns exec`, which remounts /sys and so hides the
cgroup hierarchy dockerd needs.

Reached as a real node is (`ssh_node`): an ssh server (dropbear) in the namespace at NODE_IP:22,
key logins only, its own host key; it runs in a mount namespace of its own where
/var/run/docker.sock is the stand-in's socket and root's home a folder of the test's (its
authorized_keys), so that `docker system dial-stdio` there, what Docker runs over ssh, reaches
the stand-in and nothing on the host changes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

NETNS = "dxnode"
HOST_IF, NODE_IF = "dxn-host", "dxn-node"
HOST_IP, NODE_IP, SUBNET = "10.213.7.1", "10.213.7.2", "10.213.7.0/30"
ROOT = Path("/var/lib/dockerarch/test-node")

# iptables rules added on the host, removed again with -D. DOCKER-USER is the chain Docker leaves
# to its users; the main dockerd's FORWARD policy is DROP.
RULES = [
    ["-I", "DOCKER-USER", "-i", HOST_IF, "-j", "ACCEPT"],
    ["-I", "DOCKER-USER", "-o", HOST_IF, "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT"],
    ["-t", "nat", "-I", "POSTROUTING", "-s", SUBNET, "!", "-o", HOST_IF, "-j", "MASQUERADE"],
]  # fmt: skip


def _sh(*cmd: str, check: bool = True,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=60,
                          env={**os.environ, **(env or {})})  # fmt: skip


def _undo_rule(rule: list[str]) -> None:
    deleted = [("-D" if arg == "-I" else arg) for arg in rule]
    while _sh("iptables", *deleted, check=False).returncode == 0:
        pass


def _teardown_network() -> None:
    for rule in RULES:
        _undo_rule(rule)
    _sh("ip", "netns", "del", NETNS, check=False)  # takes the veth pair with it
    _sh("ip", "link", "del", HOST_IF, check=False)


def _network() -> None:
    _teardown_network()  # whatever an interrupted earlier run left
    _sh("ip", "netns", "add", NETNS)
    _sh("ip", "link", "add", HOST_IF, "type", "veth", "peer", "name", NODE_IF)
    _sh("ip", "link", "set", NODE_IF, "netns", NETNS)
    _sh("ip", "addr", "add", f"{HOST_IP}/30", "dev", HOST_IF)
    _sh("ip", "link", "set", HOST_IF, "up")
    _sh("ip", "-n", NETNS, "addr", "add", f"{NODE_IP}/30", "dev", NODE_IF)
    _sh("ip", "-n", NETNS, "link", "set", NODE_IF, "up")
    _sh("ip", "-n", NETNS, "link", "set", "lo", "up")
    _sh("ip", "-n", NETNS, "route", "add", "default", "via", HOST_IP)
    for rule in RULES:
        _sh("iptables", *rule)


def stop(daemon: subprocess.Popen[bytes]) -> None:
    if daemon.poll() is None:
        os.killpg(daemon.pid, signal.SIGTERM)
        try:
            daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait(timeout=30)


def _stop_stale() -> None:
    """A node dockerd left running by a test run that was killed: stopped before its data root
    is removed under it."""
    try:
        pid = int((ROOT / "dockerd.pid").read_text().strip())
        if Path(f"/proc/{pid}/comm").read_text().strip() != "dockerd":
            return
        os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError):
        return
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except OSError:
            return
        time.sleep(0.5)
    os.kill(pid, signal.SIGKILL)


def _unmount_under(root: Path) -> None:
    """Undo every mount a node dockerd that was killed left below its data and exec roots (a
    build's overlay rootfs, a container's netns file), deepest first, so that removing the
    folder never deletes through a live mount."""
    for line in reversed(Path("/proc/self/mountinfo").read_text().splitlines()):
        point = line.split()[4]
        if point == str(root) or point.startswith(f"{root}/"):
            _sh("umount", "--lazy", point, check=False)


def _remove_root() -> None:
    _unmount_under(ROOT)
    if any(
        line.split()[4].startswith(f"{ROOT}/")
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
    ):
        raise AssertionError(f"mounts under {ROOT} could not be undone; not removing it")
    shutil.rmtree(ROOT, ignore_errors=True)


@dataclass(frozen=True)
class SshNode:
    endpoint: str  # ssh://root@NODE_IP
    fingerprint: str  # the host key's SHA256:...
    agent: dict[str, str]  # SSH_AUTH_SOCK (and SSH_AGENT_PID) of an agent holding the login key
    daemon: subprocess.Popen[bytes]  # the stand-in's dockerd


@contextmanager
def ssh_node() -> Iterator[SshNode]:
    """The stand-in, reached over ssh with a key from an ssh-agent of its own. The host key's
    known_hosts entry (the test pins it) is removed again at the end."""
    _sh("ssh-keygen", "-R", NODE_IP, check=False)  # a key an interrupted run left pinned
    with standin_node() as (sock, daemon):
        where = ROOT / "ssh"
        home = where / "home"
        (home / ".ssh").mkdir(mode=0o700, parents=True)
        home.chmod(0o700)
        _sh("dropbearkey", "-t", "ed25519", "-f", str(where / "host_key"))
        public = _sh("dropbearkey", "-y", "-f", str(where / "host_key")).stdout
        (where / "host_key.pub").write_text(
            next(line for line in public.splitlines() if line.startswith("ssh-")) + "\n"
        )
        fingerprint = _sh("ssh-keygen", "-lf", str(where / "host_key.pub")).stdout.split()[1]
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(where / "id"))
        (home / ".ssh" / "authorized_keys").write_text((where / "id.pub").read_text())
        script = (f"mount --bind {sock.removeprefix('unix://')} /var/run/docker.sock"
                  f" && mount --bind {home} /root"
                  f" && exec dropbear -F -E -s -p {NODE_IP}:22 -r {where / 'host_key'}"
                  f" -P {where / 'dropbear.pid'}")  # fmt: skip
        with (where / "dropbear.log").open("w") as log:
            server = subprocess.Popen(
                ["nsenter", f"--net=/run/netns/{NETNS}", "unshare", "--mount",
                 "--propagation", "private", "sh", "-c", script],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        agent = dict(
            line.split(";")[0].split("=", 1)
            for line in _sh("ssh-agent", "-s").stdout.splitlines()
            if line.startswith("SSH_")
        )
        try:
            _sh("ssh-add", "-q", str(where / "id"), env=agent)
            deadline = time.monotonic() + 30
            while not (where / "dropbear.pid").exists():
                if server.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("the stand-in's ssh server did not start:\n"
                                         + (where / "dropbear.log").read_text()[-2000:])  # fmt: skip
                time.sleep(0.2)
            yield SshNode(f"ssh://root@{NODE_IP}", fingerprint, agent, daemon)
        finally:
            stop(server)
            _sh("ssh-agent", "-k", check=False, env=agent)
            _sh("ssh-keygen", "-R", NODE_IP, check=False)


@contextmanager
def standin_node() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Yield (endpoint, daemon process) of a fresh dockerd on its own socket and data root."""
    _stop_stale()
    _remove_root()
    ROOT.mkdir(parents=True)
    sock = ROOT / "docker.sock"
    _network()
    with (ROOT / "dockerd.log").open("w") as log:
        daemon = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{NETNS}", "dockerd", "--host", f"unix://{sock}",
             "--data-root", str(ROOT / "data"), "--exec-root", str(ROOT / "exec"),
             "--pidfile", str(ROOT / "dockerd.pid")],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while _sh("docker", "-H", f"unix://{sock}", "version", check=False).returncode != 0:
                if daemon.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("the stand-in dockerd did not start:\n"
                                         + (ROOT / "dockerd.log").read_text()[-2000:])  # fmt: skip
                time.sleep(0.5)
            yield f"unix://{sock}", daemon
        finally:
            stop(daemon)
            _teardown_network()
            _remove_root()

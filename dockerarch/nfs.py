"""`dockerarch nfs serve|stop|ls`: a real NFS server for exported trees.

Where the host's kernel has an NFS server (``/proc/fs/nfsd`` and ``exportfs``), an export is one
file in ``/etc/exports.d/`` and ``exportfs -ra``. Otherwise (containers, VMs without nfsd, like
this project's CI) Debian's nfs-ganesha serves in user space: one ganesha per network namespace,
its configuration regenerated from the recorded exports at each change (it starts in a fraction
of a second; ``Graceless`` drops NFSv4's 90 s grace period). Each export is recorded under the
state directory so ``ls`` lists and ``stop`` ends it. NFSv4 needs nothing else; NFSv3 (U-Boot era
boards, klibc's nfsmount) also needs rpcbind, which always binds 0.0.0.0: ``--nfs3`` starts one.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from dockerarch import process
from dockerarch.errors import CommandFailedError, ConfigError, UsageError
from dockerarch.files import write_atomic

GANESHA = "ganesha.nfsd"
PLUGINS = "/usr/lib/x86_64-linux-gnu/ganesha"
EXPORTS_D = Path("/etc/exports.d")
HINT = "Install Debian's nfs-ganesha and nfs-ganesha-vfs (scripts/setup-host does)."


@dataclass(frozen=True, kw_only=True)
class Export:
    path: str
    client: str
    server: str  # "kernel" or "ganesha"
    netns: int  # the network namespace's inode: ganesha runs in the one it was served from
    nfs3: bool
    since: str


def state_dir() -> Path:
    return Path(os.environ.get("DOCKERARCH_STATE_DIR", "/var/lib/dockerarch")) / "nfs"


def _netns() -> int:
    return os.stat("/proc/self/ns/net").st_ino


def _records() -> Path:
    return state_dir() / "exports.json"


def load() -> list[Export]:
    """What dockerarch serves, as it recorded it; a record it cannot read is a configuration
    error naming the file (it is never rewritten from a guess)."""
    path = _records()
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(records, list):
            raise TypeError(f"a list of exports, not {type(records).__name__}")
        return [Export(**e) for e in records]
    except FileNotFoundError:
        return []
    except (OSError, ValueError, TypeError) as exc:
        raise ConfigError(
            f"dockerarch's record of its NFS exports, {path}, cannot be read: {exc}",
            fix="If nothing is served (no ganesha.nfsd runs, /etc/exports.d has no dockerarch "
            f"file), remove {path} and serve again; otherwise fix it by hand: it is a JSON list "
            "of exports (path, client, server, netns, nfs3, since).",
        ) from exc


def _save(exports: list[Export]) -> None:
    state_dir().mkdir(parents=True, exist_ok=True)
    write_atomic(_records(), (json.dumps([asdict(e) for e in exports], indent=2) + "\n").encode())


def kernel_server() -> bool:
    return Path("/proc/fs/nfsd/exports").exists() and shutil.which("exportfs") is not None


def ganesha_config(exports: list[Export], recovery: Path) -> str:
    nfs3 = any(e.nfs3 for e in exports)
    protocols = "3, 4" if nfs3 else "4"
    blocks = []
    for number, e in enumerate(exports, 1):
        clients = "*" if e.client == "*" else e.client
        blocks.append(f"""EXPORT {{
    Export_Id = {number};
    Path = "{e.path}";
    Pseudo = "{e.path}";
    Protocols = {protocols};
    Transports = TCP;
    Access_Type = None;
    Squash = No_Root_Squash;
    SecType = sys;
    CLIENT {{ Clients = {clients}; Access_Type = RW; }}
    FSAL {{ Name = VFS; }}
}}""")
    return (
        f"""# Written by dockerarch nfs serve; regenerated at every change.
NFS_CORE_PARAM {{
    NFS_Port = 2049;
    MNT_Port = 20048;
    Enable_NLM = false;
    Enable_RQUOTA = false;
    Enable_UDP = false;
    Protocols = {protocols};
    mount_path_pseudo = true;
    Plugins_Dir = "{PLUGINS}";
}}
NFSv4 {{
    Graceless = true;
    Only_Numeric_Owners = true;
    RecoveryRoot = "{recovery}";
}}
"""
        + "\n".join(blocks)
        + "\n"
    )


def _ganesha_dir(netns: int) -> Path:
    return state_dir() / f"ganesha-{netns}"


def _pid(path: Path) -> int | None:
    try:
        pid = int(path.read_text().strip())
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None


def _stop_pid(pid: int) -> None:
    os.kill(pid, signal.SIGTERM)
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except OSError:
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)


def _answers(port: int = 2049) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _restart_ganesha(exports: list[Export], netns: int) -> None:
    """(Re)start this namespace's ganesha with ``exports``; stop it when there are none.

    Everything that can be known before is checked before the running server is stopped (the
    program is there, the configuration renders); a new configuration ganesha will not serve
    is rolled back: the exports served before are served again, then the failure is told."""
    folder = _ganesha_dir(netns)
    pidfile = folder / "ganesha.pid"
    conf = folder / "ganesha.conf"
    text = ganesha_config(exports, folder / "recovery") if exports else None
    if exports:
        process.which(GANESHA, hint=HINT)  # missing: said before anything is stopped or written
    running = _pid(pidfile)
    previous = conf.read_text() if running is not None and conf.is_file() else None
    if running is not None:
        _stop_pid(running)  # ganesha first: it unregisters from rpcbind as it goes
    ours = _pid(folder / "rpcbind.pid")
    if ours is not None and not any(e.nfs3 for e in exports):
        _stop_pid(ours)
        (folder / "rpcbind.pid").unlink(missing_ok=True)
    if text is None:
        return
    folder.mkdir(parents=True, exist_ok=True)
    if any(e.nfs3 for e in exports):
        _ensure_rpcbind(folder)
    (folder / "recovery").mkdir(exist_ok=True)
    try:
        _start_ganesha(folder, text)
    except CommandFailedError as failed:
        if previous is None:
            raise
        try:
            _start_ganesha(folder, previous)
        except CommandFailedError:
            raise failed from None
        failed.problem += " (the exports served before are served again)"
        raise


def _start_ganesha(folder: Path, text: str) -> None:
    conf, log, pidfile = folder / "ganesha.conf", folder / "ganesha.log", folder / "ganesha.pid"
    write_atomic(conf, text.encode())
    pidfile.unlink(missing_ok=True)
    process.spawn(
        [GANESHA, "-F", "-f", str(conf), "-L", str(log), "-p", str(pidfile), "-N", "NIV_EVENT"],
        daemon=True, hint=HINT,
    )  # fmt: skip
    for _ in range(100):
        if _answers() and _pid(pidfile) is not None:
            return
        time.sleep(0.1)
    tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
    raise CommandFailedError(
        f"nfs-ganesha did not start serving within 10 s: {' / '.join(tail) or 'no log'}",
        fix=f"Read {log}; another NFS server may hold port 2049 in this network namespace.",
    )


def _ensure_rpcbind(folder: Path) -> None:
    """rpcbind for NFSv3, started (and recorded, so it is stopped with the last v3 export) when
    none runs. It binds 0.0.0.0:111 whatever it is told: run it in a namespace of its own when
    that matters."""
    if _answers(111):  # one runs in this network namespace already
        return
    hint = "Install Debian's rpcbind (NFSv3 needs it)."
    child = process.spawn(["rpcbind", "-f", "-w"], daemon=True, hint=hint)
    (folder / "rpcbind.pid").write_text(f"{child.pid}\n")
    for _ in range(50):
        if _answers(111):
            return
        time.sleep(0.1)
    raise CommandFailedError(
        "rpcbind did not start listening on port 111 within 5 s",
        fix="Check that nothing else holds port 111 here, and that no other rpcbind runs on this "
        "machine (pgrep -a rpcbind): it takes /run/rpcbind.lock, whatever network namespace it "
        "runs in, and a second one exits.",
    )


def check_client(client: str) -> None:
    """``client`` is who may mount an export: a network (CIDR), an address, a host name or *."""
    if client == "*":
        return
    try:
        ipaddress.ip_network(client, strict=False)
    except ValueError:
        if not re.fullmatch(r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?", client):
            raise UsageError(
                f"--client {client!r} is not a network (CIDR), a host name or *",
                fix="Give the boards' network, like --client 192.168.1.0/24.",
            ) from None


def serve(path: Path, *, client: str = "*", nfs3: bool = False) -> Export:
    """Export ``path`` read-write to ``client``; recorded, so ``stop`` and ``ls`` know it.
    Nothing already served is touched until the new export is known to be well-formed."""
    check_client(client)
    path = path.resolve()
    if not path.is_dir():
        raise UsageError(f"{path} is not a directory", fix="Export a tree export-rootfs wrote.")
    if '"' in str(path) or any(c.isspace() for c in str(path)):
        raise UsageError(f"{path} has quotes or spaces, which an exports line cannot hold",
                         fix="Export it from a path without them.")  # fmt: skip
    exports = [e for e in load() if e.path != str(path)]
    kind = "kernel" if kernel_server() else "ganesha"
    export = Export(path=str(path), client=client, server=kind, netns=_netns(), nfs3=nfs3,
                    since=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))  # fmt: skip
    if kind == "kernel":
        EXPORTS_D.mkdir(parents=True, exist_ok=True)
        line = f"{path} {client}(rw,sync,no_subtree_check,no_root_squash)\n"
        write_atomic(EXPORTS_D / f"dockerarch-{_slug(path)}.exports", line.encode())
        process.run(["exportfs", "-ra"])
    else:
        _restart_ganesha([*[e for e in exports if e.netns == export.netns and e.server == "ganesha"],
                          export], export.netns)  # fmt: skip
    _save([*exports, export])
    return export


def _slug(path: Path | str) -> str:
    return str(path).strip("/").replace("/", "-") or "root"


def stop(path: Path | None) -> list[Export]:
    """End the export of ``path`` (every export with None); the ones ended."""
    exports = load()
    target = None if path is None else str(path.resolve())
    ending = [e for e in exports if target is None or e.path == target]
    if target is not None and not ending:
        raise UsageError(
            f"{target} is not exported by dockerarch", fix="dockerarch nfs ls lists what is."
        )
    keep = [e for e in exports if e not in ending]
    for e in ending:
        if e.server == "kernel":
            (EXPORTS_D / f"dockerarch-{_slug(e.path)}.exports").unlink(missing_ok=True)
    if any(e.server == "kernel" for e in ending):
        process.run(["exportfs", "-ra"])
    for netns in {e.netns for e in ending if e.server == "ganesha"}:
        others = [e for e in keep if e.netns == netns and e.server == "ganesha"]
        if others and netns != _netns():
            raise UsageError(
                f"{others[0].path} is served from another network namespace by the same server",
                fix="Run nfs stop from that namespace (nsenter --net=...), or nfs stop --all.",
            )
        _restart_ganesha([e for e in keep if e.netns == netns and e.server == "ganesha"], netns)
    _save(keep)
    return ending


def running(export: Export) -> bool:
    if export.server == "kernel":
        return (EXPORTS_D / f"dockerarch-{_slug(export.path)}.exports").exists()
    return _pid(_ganesha_dir(export.netns) / "ganesha.pid") is not None

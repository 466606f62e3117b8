"""``dockerarch doctor``: is this machine ready to build for ARM, and if not, what to do.

Each check returns a CheckResult and never raises: whatever is broken, the table is printed.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from dockerarch import arm_probe, binfmt, engine, machineimages, process
from dockerarch.config import RegistryConfig
from dockerarch.errors import DockerarchError

MIN_BUILDX = (0, 12)
ARM_PLATFORMS = ("linux/arm/v7", "linux/arm64")
SETUP = "scripts/setup-host"


@dataclass(frozen=True, kw_only=True)
class CheckResult:
    name: str
    ok: bool
    detail: str
    fix: str | None = None
    required: bool = True
    skipped: bool = False

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _passed(name: str, detail: str) -> CheckResult:
    return CheckResult(name=name, ok=True, detail=detail)


def _failed(name: str, detail: str, fix: str) -> CheckResult:
    return CheckResult(name=name, ok=False, detail=detail, fix=fix)


def _skipped(name: str, because: str, fix: str) -> CheckResult:
    return CheckResult(name=name, ok=False, skipped=True, detail=f"not run: {because}", fix=fix)


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".") if part.isdigit())


def check_daemon() -> CheckResult:
    try:
        info = engine.daemon_info()
    except DockerarchError as exc:
        return _failed("docker daemon", exc.problem, exc.fix or engine.START_HINT)
    return _passed(
        "docker daemon", f"Docker {info.version}, API {info.api_version}, at {info.host}"
    )


def check_buildx() -> CheckResult:
    try:
        version = engine.buildx_version()
    except DockerarchError as exc:
        return _failed("buildx", exc.problem, exc.fix or f"Run {SETUP}.")
    wanted = ".".join(map(str, MIN_BUILDX))
    if version_tuple(version) < MIN_BUILDX:
        return _failed(
            "buildx",
            f"version {version} is older than {wanted}",
            f"Install docker-buildx >= {wanted}; {SETUP} installs it from Debian trixie.",
        )
    return _passed("buildx", f"version {version} (>= {wanted})")


def check_binfmt(arch: str, entries: list[binfmt.BinfmtEntry] | None) -> CheckResult:
    name = f"binfmt {arch}"
    register = f"update-binfmts --enable qemu-{'arm' if arch == 'armv7' else 'aarch64'}"
    if entries is None:
        return _failed(
            name,
            f"binfmt_misc is not mounted at {binfmt.BINFMT_DIR}",
            f"Mount it: mount -t binfmt_misc binfmt_misc {binfmt.BINFMT_DIR}, then {register} "
            f"({SETUP} does both).",
        )
    header = arm_probe.probe_executable(arch)[:64]
    entry = binfmt.entry_for(header, entries)
    if entry is None:
        return _failed(
            name,
            f"no binfmt_misc entry runs {arch} ELF files",
            f"Install qemu-user-static and binfmt-support, then {register} ({SETUP} does).",
        )
    where = f"entry '{entry.name}', interpreter {entry.interpreter}, flags '{entry.flags}'"
    if not entry.enabled:
        return _failed(name, f"{where} is disabled", f"Enable it: {register}.")
    if not entry.fix_binary:
        return _failed(
            name,
            f"{where} lacks the F (fix-binary) flag, so containers cannot find QEMU",
            f"Re-register it: echo -1 > {binfmt.BINFMT_DIR / entry.name}; then {register} "
            "(Debian's qemu-user-static registers with F).",
        )
    if not os.path.exists(entry.interpreter):
        return _failed(
            name,
            f"{where}: the interpreter does not exist",
            "Reinstall qemu-user-static (apt-get install --reinstall qemu-user-static).",
        )
    return _passed(name, where)


def check_builder(daemon_ok: bool) -> CheckResult:
    name = "builder platforms"
    fix_daemon = "Fix the docker daemon check first."
    if not daemon_ok:
        return _skipped(name, "the daemon does not answer", fix_daemon)
    try:
        builder = engine.current_builder()
    except DockerarchError as exc:
        return _failed(name, exc.problem, exc.fix or fix_daemon)
    missing = [p for p in ARM_PLATFORMS if p not in builder.platforms]
    where = f"builder '{builder.name}' ({builder.driver} driver)"
    if missing:
        return _failed(
            name,
            f"{where} does not list {', '.join(missing)}; it has {', '.join(builder.platforms)}",
            "Register QEMU (see the binfmt checks), then restart dockerd so it sees the "
            "emulators; 'docker buildx use default' selects the engine's own builder.",
        )
    return _passed(name, f"{where} lists {', '.join(ARM_PLATFORMS)}")


def check_runs(arch: str) -> CheckResult:
    name = f"run {arch} binary"
    fix = "Make the binfmt check above pass; QEMU must be registered with the F flag."
    with tempfile.TemporaryDirectory(prefix="dockerarch-probe-") as tmp:
        path = Path(tmp) / f"probe-{arch}"
        path.write_bytes(arm_probe.probe_executable(arch))
        path.chmod(0o755)
        try:
            done = process.run([str(path)], check=False, timeout=30)
        except (OSError, DockerarchError) as exc:
            return _failed(name, f"the {arch} probe did not start: {exc}", fix)
    if done.returncode != 0 or done.stdout.encode() != arm_probe.MESSAGE:
        said = (done.stderr or done.stdout).strip()[:200]
        return _failed(name, f"the {arch} probe exited {done.returncode}: {said!r}", fix)
    return _passed(name, f"a static {arch} ELF ran under QEMU and printed its message")


def check_registry(config: RegistryConfig) -> CheckResult:
    name = "registry"
    where = "registry.yaml" if config.source == RegistryConfig().source else config.source
    fix = (
        f"Start the local one with {SETUP}, or set registry.address in {where}."
        if config.loopback
        else f"Check that the registry at {config.address} is up, or fix {where}."
    )
    # Loopback and the user's own registry are reached directly, never through a proxy.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(config.api_url, timeout=5) as response:
            status = response.status
            api = response.headers.get("Docker-Distribution-Api-Version", "")
    except urllib.error.HTTPError as exc:
        status, api = exc.code, exc.headers.get("Docker-Distribution-Api-Version", "")
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return _failed(name, f"nothing answers at {config.api_url} ({reason})", fix)
    if status in (200, 401) and api.startswith("registry/2"):
        auth = ", asks for login" if status == 401 else ""
        return _passed(name, f"{config.address} answers ({api}{auth})")
    return _failed(
        name, f"{config.api_url} answered HTTP {status} but is not a Docker registry", fix
    )


def check_index(config: RegistryConfig) -> CheckResult:
    """The package index `dockerarch upload` publishes to answers the simple API."""
    name = "package index"
    index = config.index
    where = "registry.yaml" if config.source == RegistryConfig().source else config.source
    fix = (
        f"Start the local one with {SETUP}, or set index.url and index.simple in {where}."
        if index.loopback
        else f"Check that the index at {index.server} is up, or fix index: in {where}."
    )
    url = index.simple_url("any-target").rsplit("any-target", 1)[0]
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(index.server + "/", headers={"Accept": "text/html"})
    try:
        with opener.open(request, timeout=5) as response:
            server = response.headers.get("X-Devpi-Server-Version")
    except urllib.error.HTTPError as exc:
        if exc.code >= 500:
            return _failed(name, f"{index.server} answered HTTP {exc.code} {exc.reason}", fix)
        server = exc.headers.get("X-Devpi-Server-Version")
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return _failed(name, f"nothing answers at {index.server} ({reason})", fix)
    what = f"devpi-server {server}" if server else "an HTTP server"
    return _passed(name, f"{index.server} answers ({what}); indexes per target under {url}")


def check_compiler_cache(config: RegistryConfig, state_dir: Path) -> CheckResult:
    """The team's shared compiler cache of registry.yaml answers and takes this machine's
    credentials, as a build would find it."""
    from dockerarch import compilercache

    name = "compiler cache"
    cache = config.compiler_cache
    where = "registry.yaml" if config.source == RegistryConfig().source else config.source
    if cache is None:
        return _passed(name, f"none shared ({where} has no compiler_cache:): builds use this "
                       "machine's cache only")  # fmt: skip
    said: list[str] = []
    try:
        remote = compilercache.credentials(cache, state_dir=state_dir)
        used = compilercache.check(remote, say=said.append)
    except compilercache.CompilerCacheError as exc:
        return _failed(name, exc.problem, exc.fix or "")
    if used is None:
        fix = (f"Start the local one with {SETUP}, or fix compiler_cache.url in {where}."
               if cache.loopback else f"Check that the server at {cache.url} is up.")  # fmt: skip
        return _failed(name, said[0].removeprefix("compiler cache: "), fix)
    if compilercache.reader_may_write(remote):
        return _failed(
            name,
            f"{cache.url} lets the reader's credential write: any build given it (every fetched "
            "sdist's) could put objects of its choosing in the team's cache",
            "Refuse the reader every method but GET and HEAD on the server (nginx: limit_except "
            f"GET with the writers' htpasswd alone, as {SETUP} writes it).",
        )
    mode = "read-only" if cache.read_only else "read-write"
    if not cache.read_only:
        mode += (f" for your own trees, {'and' if cache.writes == 'all' else 'read-only for'} "
                 "fetched code" + ("" if remote.reader or cache.writes == "all" or not remote.password
                                   else " (no reader's credential here: fetched code builds without it)")
                 + (" (the server refuses the reader writes)" if remote.reader else ""))  # fmt: skip
    return _passed(name, f"{cache.url} answers and takes this machine's credentials "
                   f"({remote.source}); {mode}{_store_size(state_dir) if cache.loopback else ''}")  # fmt: skip


def _store_size(state_dir: Path) -> str:
    """What setup-host's cache holds against its limit, from its size keeper's last sweep."""
    import json

    try:
        status = json.loads((state_dir / "ccache" / "logs" / "sweep.json").read_text())
        held, limit = int(status["bytes"]), int(status["limit"])
    except (OSError, ValueError, KeyError, TypeError):
        return ""
    evicted = int(status.get("evicted_since_start") or 0)
    return f"; holds {held / (1 << 30):.2f} GiB of its {limit / (1 << 30):.1f} GiB limit" + (
        f" ({evicted} least recently used objects removed)" if evicted else ""
    )


def _cache_limit(state_dir: Path | None) -> str:
    """The build cache limit setup-host gave dockerd (its dockerd.json), or "" when none."""
    import json

    if state_dir is None:
        return ""
    try:
        gc = json.loads((state_dir / "dockerd.json").read_text())["builder"]["gc"]
    except (OSError, ValueError, KeyError, TypeError):
        return ""
    limit = gc.get("defaultKeepStorage") if isinstance(gc, dict) and gc.get("enabled") else None
    return f" of its {limit} limit" if isinstance(limit, str) else ""


def check_disk(daemon_ok: bool, min_free_gib: float, state_dir: Path | None = None) -> CheckResult:
    name = "disk space"
    if not daemon_ok:
        return _skipped(name, "the daemon does not answer", "Fix the docker daemon check first.")
    try:
        root = engine.docker_root_dir()
        free = shutil.disk_usage(root).free / 2**30
    except (DockerarchError, OSError) as exc:
        return _failed(name, f"cannot measure Docker's data root: {exc}", "Check 'docker info'.")
    detail = f"{free:.1f} GiB free under {root}"
    cache = engine.build_cache_size()
    if cache:
        detail += (f"; BuildKit's cache there holds {machineimages.gigabytes(cache)}"
                   f"{_cache_limit(state_dir)}")  # fmt: skip
    if free < min_free_gib:
        return _failed(
            name,
            f"{detail}; builds want at least {min_free_gib:g} GiB",
            "Free space there ('dockerarch prune' removes toolchain images and runtime bases no "
            f"build used for {machineimages.DEFAULT_UNUSED_DAYS} days; 'docker builder prune' "
            "empties BuildKit's cache, which the next builds fill again), or move Docker's "
            "data-root to a larger disk.",
        )
    return _passed(name, detail)


def check_machine_images(daemon_ok: bool, registry: RegistryConfig | None = None) -> CheckResult:
    """How much this machine's toolchain images and runtime bases hold, and whether the team's
    registry shares them (never a failure)."""
    name = "machine images"
    if not daemon_ok:
        return CheckResult(name=name, ok=False, skipped=True, required=False,
                           detail="not run: no docker daemon", fix=None)  # fmt: skip
    images = machineimages.listing()
    days = machineimages.DEFAULT_UNUSED_DAYS
    detail = machineimages.summary(images, days, time.time())
    if registry is not None:
        shared = machineimages.sharing(registry)
        detail += ("; not shared (machine_images: off)" if shared is None else
                   f"; {'pulled from and pushed to' if shared.push else 'pulled from'} {shared.prefix}")  # fmt: skip
    return CheckResult(name=name, ok=True, required=False, detail=detail)


def check_bundle_tools() -> CheckResult:
    """What `dockerarch bundle` proves with (never a failure of the machine: only bundles need
    it): Debian's arm-none-eabi-gcc with newlib, qemu-system-arm, onnxruntime."""
    import importlib.util

    name = "bundle tools"
    missing = [tool for tool in ("arm-none-eabi-gcc", "qemu-system-arm") if not shutil.which(tool)]
    if not missing:
        from dockerarch.mcu import bundle, profiles

        try:
            bundle.newlib_paths(profiles.get("cortex-m7"))
        except DockerarchError:
            missing.append("newlib")
    missing += [m for m in ("onnx", "onnxruntime") if importlib.util.find_spec(m) is None]
    if missing:
        return CheckResult(name=name, ok=False, required=False,
                           detail=f"missing: {', '.join(missing)} (only dockerarch bundle needs them)",
                           fix="Run scripts/setup-host, which installs them (Debian's "
                           "gcc-arm-none-eabi, libnewlib-arm-none-eabi, qemu-system-arm, and "
                           "the mcu extra: onnx, onnxruntime).")  # fmt: skip
    gcc = process.run(["arm-none-eabi-gcc", "-dumpversion"], check=False).stdout.strip()
    return CheckResult(name=name, ok=True, required=False,
                       detail=f"arm-none-eabi-gcc {gcc} with newlib, qemu-system-arm, onnxruntime: "
                       "bundles are checked and proved on QEMU's Cortex-M7 and M4")  # fmt: skip


def _guarded(name: str, check: Callable[[], CheckResult]) -> CheckResult:
    """A check that hits something unforeseen still yields a row, never a traceback."""
    try:
        return check()
    except Exception as exc:
        return _failed(name, f"the check itself failed: {type(exc).__name__}: {exc}",
                       "Run with --debug and report this as a dockerarch bug.")  # fmt: skip


def state_dir() -> Path:
    from dockerarch.base import STATE_DIR

    return STATE_DIR


def run_checks(registry: RegistryConfig, *, min_free_gib: float = 10.0) -> list[CheckResult]:
    daemon = _guarded("docker daemon", check_daemon)
    entries = binfmt.read_entries() if binfmt.is_mounted() else None
    results = [
        daemon,
        _guarded("buildx", check_buildx),
        *(
            _guarded(f"binfmt {a}", functools.partial(check_binfmt, a, entries))
            for a in arm_probe.PROBES
        ),
        _guarded("builder platforms", lambda: check_builder(daemon.ok)),
        *(_guarded(f"run {a} binary", functools.partial(check_runs, a)) for a in arm_probe.PROBES),
        _guarded("registry", lambda: check_registry(registry)),
        _guarded("package index", lambda: check_index(registry)),
        _guarded("compiler cache", lambda: check_compiler_cache(registry, state_dir())),
        _guarded("disk space", lambda: check_disk(daemon.ok, min_free_gib, state_dir())),
        _guarded("machine images", lambda: check_machine_images(daemon.ok, registry)),
        _guarded("bundle tools", check_bundle_tools),
    ]
    return results

"""What a hybrid build's logs say: every compiler run and who started it (native, emulated),
ccache's counters (local and remote hits, compiled, sent), and the native drivers used.
"""

from __future__ import annotations

import collections
import dataclasses
from dataclasses import dataclass

DRIVERS_LOG = "/var/log/dockerarch-drivers.log"
# ccache's own record of each run of the build (stats_log): what came from the cache, so a build
# run again after an interruption shows what it did not compile again.
CCACHE_LOG = "/var/log/dockerarch-ccache.log"
CCACHE_EXPORT = ".dockerarch-ccache.log"
DRIVERS_EXPORT = ".dockerarch-drivers.log"
# Where each compile sent to a compile farm ran (dockerarch-distcc: "PLACE ok|failed
# [retried-after HOST,...]"), exported beside the artifacts.
FARM_LOG = "/var/log/dockerarch-farm.log"
FARM_EXPORT = ".dockerarch-farm.log"
LOG = "/var/log/dockerarch-toolchain.log"
LOG_STAGE = "toolchain-log"  # a hybrid build's export: the artifacts and, beside them, LOG_EXPORT
LOG_EXPORT = ".dockerarch-toolchain.log"


def count_runs(toolchain_log: str) -> dict[str, int]:
    """Counts of dockerarch-cc's log: one line per compiler run, 'MACHINE NAME compile|other
    PARENT', PARENT the program that started it (QEMU's interpreter when that was emulated,
    followed by the emulated program: 'arm-binfmt-P:cmake')."""
    runs = compiles = native = 0
    for line in toolchain_log.splitlines():
        fields = line.split()
        if len(fields) != 4:
            continue
        runs += 1
        compiles += fields[2] == "compile"
        native += fields[0] == "x86_64"
    started_emulated = sum(emulated_starters(toolchain_log).values())
    return {
        "runs": runs, "compiles": compiles, "native": native, "emulated": runs - native,
        "started_by_native": runs - started_emulated, "started_by_emulated": started_emulated,
    }  # fmt: skip


def emulated_starters(toolchain_log: str) -> dict[str, int]:
    """The emulated programs that started compiler runs, with how many each started, most
    first: what of a hybrid build's driver still runs under QEMU ('?' where the log does not
    name the program)."""
    starters: collections.Counter[str] = collections.Counter()
    for line in toolchain_log.splitlines():
        fields = line.split()
        if len(fields) == 4 and emulated_starter(fields[3]):
            starters[fields[3].partition(":")[2] or "?"] += 1
    return dict(starters.most_common())


def count_ccache(stats_log: str) -> dict[str, int]:
    """ccache's stats_log: a block per run ("# FILE", then its counters): hits (direct or
    preprocessed; ``remote_hits`` of them from the shared compiler cache), misses (compiled),
    runs ccache could not cache (links, probes); with a shared cache, the objects sent to it
    (``sent``), the runs it failed (``remote_errors``: down, refused, timed out) and the compiles
    that did without it after that (``remote_skipped``: dockerarch-cc's own blocks)."""
    counts = dict.fromkeys(
        ("hits", "misses", "uncached", "remote_hits", "sent", "remote_errors", "remote_skipped"), 0
    )
    blocks = [b for b in ("\n" + stats_log).split("\n# ") if b.strip()]
    for block in blocks:
        lines = block.split("\n")[1:]
        counters = set(lines)
        if counters - {""} == {"remote_storage_skipped"}:  # not a run of ccache's
            counts["remote_skipped"] += 1
            continue
        if counters & {"direct_cache_hit", "preprocessed_cache_hit"}:
            counts["hits"] += 1
            counts["remote_hits"] += "remote_storage_hit" in counters
        elif "cache_miss" in counters:
            counts["misses"] += 1
        else:
            counts["uncached"] += 1
        counts["sent"] += lines.count("remote_storage_write")
        counts["remote_errors"] += bool(
            counters & {"remote_storage_error", "remote_storage_timeout"}
        )
    return counts


def emulated_starter(program: str) -> bool:
    """Whether a parent program's basename is QEMU's (the binfmt interpreter of an emulated
    process: qemu-arm-static, arm-binfmt-P)."""
    return "qemu" in program or "binfmt" in program


@dataclass(frozen=True)
class DriverReport:
    """What use-native-drivers did: packages run natively (with versions), and those left
    emulated with the reason; how often each code generator ran natively; and where each PEP 517
    backend ran (dockerarch_native_backend: hook calls run natively, by backend, and the backends
    sent back to the emulated Python, with the reason), with uv's interpreter queries answered
    natively and the compiled build requirements given x86-64 twins (by version)."""

    native: dict[str, str]
    emulated: dict[str, str]
    generators: dict[str, int] = dataclasses.field(default_factory=dict)  # runs per generator
    backends: dict[str, int] = dataclasses.field(default_factory=dict)  # native hook calls
    emulated_backends: dict[str, str] = dataclasses.field(default_factory=dict)
    queries: dict[str, int] = dataclasses.field(default_factory=dict)  # uv's, answered natively
    twins: dict[str, str] = dataclasses.field(default_factory=dict)  # build requirement: version
    twins32: dict[str, str] = dataclasses.field(default_factory=dict)  # i686 ones (i386 backend)
    # pure-Python build requirements whose compiled x86-64 modules were not found: why
    pure: dict[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> DriverReport:
        native: dict[str, str] = {}
        emulated: dict[str, str] = {}
        runs: dict[str, int] = {}
        backends: dict[str, int] = {}
        emulated_backends: dict[str, str] = {}
        queries: dict[str, int] = {}
        twins: dict[str, str] = {}
        twins32: dict[str, str] = {}
        pure: dict[str, str] = {}
        for line in text.splitlines():
            kind, _, rest = line.partition(" ")
            package, _, detail = rest.partition(" ")
            if kind == "native" and package:
                native[package] = detail.split()[0] if detail else ""
            elif kind == "native-wheel" and package:  # once per Python start: said once
                native[f"{package} (PyPI wheel)"] = detail.strip()
            elif kind == "native-python" and package:  # one line per generator run
                runs[package] = runs.get(package, 0) + 1
            elif kind == "native-backend" and package:  # one line per hook call
                backends[package] = backends.get(package, 0) + 1
            elif kind == "native-query" and package:  # one line per uv interpreter query
                queries[package] = queries.get(package, 0) + 1
            elif kind == "emulated-backend" and package:
                emulated_backends[package] = detail
            elif kind == "native-twin" and package:  # once per build environment and machine
                version, _, machine = detail.strip().partition(" ")
                (twins32 if machine == "i686" else twins)[package] = version
            elif kind == "pure-python" and package:  # a speed-up not found
                version, _, why = detail.partition(" ")
                pure[f"{package} {version}"] = why
            elif kind == "emulated-python" and package:  # a generator sent back
                emulated[f"code generator {package}"] = detail
            elif kind == "emulated" and package:
                emulated[package] = detail
        return cls(native=native, emulated=emulated, generators=runs, backends=backends,
                   emulated_backends=emulated_backends, queries=queries, twins=twins,
                   twins32=twins32, pure=pure)  # fmt: skip

    def as_dict(self) -> dict[str, dict[str, str] | dict[str, int]]:
        return {"native": dict(self.native), "emulated": dict(self.emulated),
                "native_generators": dict(self.generators),
                "native_backends": dict(self.backends),
                "emulated_backends": dict(self.emulated_backends),
                "native_queries": dict(self.queries), "native_twins": dict(self.twins),
                "native_twins_i686": dict(self.twins32),
                "pure_python": dict(self.pure)}  # fmt: skip

    def lines(self) -> list[str]:
        """What the progress says."""
        said = []
        if self.native:
            said.append("native build driver: " + ", ".join(
                f"{p} {v}" for p, v in self.native.items()))  # fmt: skip
        said += [f"{p} stays emulated: {why}" for p, why in self.emulated.items()]
        if self.generators:
            said.append("native code generators: " + ", ".join(
                f"{g} ({n} run{'s' if n != 1 else ''})" for g, n in self.generators.items()))  # fmt: skip
        if self.backends:
            said.append("native PEP 517 backend: " + ", ".join(
                f"{b} ({n} hook call{'s' if n != 1 else ''})" for b, n in self.backends.items()))  # fmt: skip
        for machine, twins in (("x86-64", self.twins), ("i686", self.twins32)):
            if twins:
                said.append(f"{machine} compiled twins of build requirements: " + ", ".join(
                    f"{p} {v}" for p, v in twins.items()))  # fmt: skip
        said += [f"{p} runs natively from its pure-Python modules (slower): {why}"
                 for p, why in self.pure.items()]  # fmt: skip
        said += [f"PEP 517 backend {b} ran emulated: {why}"
                 for b, why in self.emulated_backends.items()]  # fmt: skip
        if self.queries:
            said.append("uv's interpreter query answered natively as the target: " + ", ".join(
                f"{p} ({n}x)" for p, n in self.queries.items()))  # fmt: skip
        return said

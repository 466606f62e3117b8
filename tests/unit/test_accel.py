from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from dockerarch import accel
from dockerarch.accel import aptquery
from dockerarch.errors import ConfigError, UsageError
from dockerarch.recipes import load_recipes
from dockerarch.targets import load_targets

TARGETS = load_targets()
RECIPES = load_recipes()
AMD64 = TARGETS["debian-amd64"]


def _decide(target: str, *, recipe: str = "wheel", requested: str = "hybrid", route: str = "qemu",
            available: bool = True) -> accel.Decision:  # fmt: skip
    return accel.decide(
        TARGETS[target], RECIPES[recipe], requested=requested, route_accel=route,
        toolchain_base=AMD64, cross_available=lambda _package, _suite: available,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("target", "triplet", "gcc", "debian_arch"),
    [
        ("debian-armv7", "arm-linux-gnueabihf", 12, "armhf"),
        ("debian-aarch64", "aarch64-linux-gnu", 12, "arm64"),
        ("rpi3", "arm-linux-gnueabihf", 12, "armhf"),
        (
            "pynq-zu",
            "aarch64-linux-gnu",
            11,
            "arm64",
        ),  # Ubuntu 22.04 ships gcc 11: so does its toolchain
        ("pynq-z1", "arm-linux-gnueabihf", 11, "armhf"),
    ],
)
def test_hybrid_toolchain_matches_the_targets_triplet_and_gcc(
    target: str, triplet: str, gcc: int, debian_arch: str
) -> None:
    decision = _decide(target)
    assert decision.accel == "hybrid" and not decision.note
    toolchain = decision.toolchain
    assert toolchain is not None
    assert (toolchain.triplet, toolchain.gcc, toolchain.debian_arch) == (triplet, gcc, debian_arch)
    assert toolchain.packages[:4] == (
        f"gcc-{gcc}-{triplet}",
        f"g++-{gcc}-{triplet}",
        f"gfortran-{gcc}-{triplet}",
        f"binutils-{triplet}",
    )
    assert toolchain.base_image == AMD64.base_image


def test_native_nodes_and_plain_mode_graft_nothing() -> None:
    assert _decide("debian-aarch64", route="native") == accel.Decision(accel="native")
    assert _decide("debian-aarch64", requested="none") == accel.Decision(accel="qemu")


def test_a_missing_cross_compiler_falls_back_to_plain_qemu_saying_why() -> None:
    decision = _decide("pynq-zu", available=False)
    assert decision.accel == "qemu" and decision.toolchain is None
    assert "Debian bookworm has no gcc-11-aarch64-linux-gnu" in decision.note
    assert "plain QEMU" in decision.note


def test_fortran_without_debian_s_cross_gfortran_builds_plain_saying_why() -> None:
    """A build that compiles Fortran (gfortran among its packages: scipy's meson.build asks for
    it) cannot be hybrid where Debian has no cross gfortran of the target's gcc: the grafted
    toolchain would have none, and the ARM one is left out of a hybrid build stage."""
    recipe = dataclasses.replace(RECIPES["wheel"], apt=(*RECIPES["wheel"].apt, "gfortran"))
    no_fortran = lambda package, _suite: not package.startswith("gfortran-")  # noqa: E731
    decision = accel.decide(TARGETS["pynq-z1"], recipe, requested="hybrid", route_accel="qemu",
                            toolchain_base=AMD64, cross_available=no_fortran)  # fmt: skip
    assert decision.accel == "qemu" and decision.toolchain is None
    assert "has no gfortran-11-arm-linux-gnueabihf" in decision.note
    # C and C++ only: hybrid all the same, without the cross gfortran
    plain_c = accel.decide(TARGETS["pynq-z1"], RECIPES["wheel"], requested="hybrid",
                           route_accel="qemu", toolchain_base=AMD64, cross_available=no_fortran)  # fmt: skip
    assert plain_c.accel == "hybrid" and plain_c.toolchain is not None
    assert not plain_c.toolchain.fortran


def test_a_recipe_that_needs_the_arm_compiler_builds_plain() -> None:
    recipe = dataclasses.replace(
        RECIPES["qpulib"],
        no_hybrid="its Makefile calls /usr/bin/arm-linux-gnueabihf-gcc-12 -v and parses it",
    )
    decision = accel.decide(TARGETS["rpi3"], recipe, requested="hybrid", route_accel="qemu",
                            toolchain_base=AMD64, cross_available=lambda _p, _s: True)  # fmt: skip
    assert decision.accel == "qemu" and decision.toolchain is None
    assert (
        "recipe 'qpulib' compiles with the emulated ARM compiler (its Makefile calls"
        in decision.note
    )


def test_a_recipe_without_a_compiler_has_nothing_to_graft() -> None:
    recipe = dataclasses.replace(RECIPES["wheel"], apt=("python3", "ca-certificates"))
    decision = accel.decide(TARGETS["debian-armv7"], recipe, requested="hybrid", route_accel="qemu",
                            toolchain_base=AMD64, cross_available=lambda _p, _s: True)  # fmt: skip
    assert decision == accel.Decision(accel="qemu")


def test_build_stage_packages_drop_the_arm_compiler_and_keep_what_it_brought() -> None:
    assert accel.build_stage_apt(["build-essential", "python3-dev", "g++", "gcc-12", "cmake"]) == [
        "python3-dev", "cmake", "libc6-dev", "make", "patch", "libatomic1"]  # fmt: skip
    assert accel.build_stage_apt(["make", "libc6-dev", "libgcc-12-dev", "gcc-doc-base"]) == [
        "make", "libc6-dev", "libgcc-12-dev", "gcc-doc-base", "patch", "libatomic1"]  # fmt: skip


MADISON = """\
gcc-12-aarch64-linux-gnu | 12.2.0-14cross1 | http://mirror.example.invalid/debian bookworm/main amd64 Packages
ccache | 4.8+really4.7.5-1 | http://mirror.example.invalid/debian bookworm-updates/main amd64 Packages
 python3 | 3.12.6-1 | http://mirror.example.invalid/debian trixie/main amd64 Packages
"""


@pytest.mark.parametrize(
    ("suite", "found"), [("bookworm", True), ("trixie", True), ("bullseye", False)]
)
def test_madison_output_is_read_per_suite(suite: str, found: bool) -> None:
    assert accel.madison_has(MADISON, suite) is found
    assert accel.madison_has("", suite) is False
    assert accel.madison_has(MADISON.splitlines()[2], "bookworm") is False  # trixie only


def test_one_madison_run_answers_for_each_package_it_was_asked() -> None:
    """plan_accel asks apt-cache once for all the cross packages of a run (each run of it reads
    the whole cache, about 0.7 s): each package's answer comes from its own lines only."""
    by_package = accel.madison_by_package(MADISON + "N: Unable to locate package nothing\n")
    assert sorted(by_package) == ["ccache", "gcc-12-aarch64-linux-gnu", "python3"]
    assert accel.madison_has(by_package["gcc-12-aarch64-linux-gnu"], "bookworm") is True
    assert accel.madison_has(by_package["python3"], "bookworm") is False  # trixie's line
    assert accel.madison_has(by_package.get("nothing", ""), "bookworm") is False


POLICY = """\
Package files:
 100 /var/lib/dpkg/status
     release a=now
 100 http://mirror.example.invalid/debian trixie/main amd64 Packages
     release v=13.8,o=Debian,a=stable,n=trixie,l=Debian,c=main,b=amd64
 500 http://mirror.example.invalid/debian bookworm/main amd64 Packages
     release v=12.15,o=Debian,a=oldstable,n=bookworm,l=Debian,c=main,b=amd64
Pinned packages:
"""


def test_the_hosts_suites_are_known_by_codename_and_archive_name() -> None:
    assert accel.release_codenames(POLICY) == {
        "trixie": "trixie", "stable": "trixie", "bookworm": "bookworm", "oldstable": "bookworm",
    }  # fmt: skip
    assert accel.release_codenames("") == {}


def test_the_hosts_apt_answers_are_kept_until_its_lists_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each dockerarch run asked apt-cache twice (policy, madison: 1.5 s) before its first hybrid
    build step; the answers are kept in the state directory while the host's package lists and
    sources are the ones they were read from."""
    import types

    from dockerarch import base, process

    lists = tmp_path / "lists"
    lists.mkdir()
    (lists / "deb.example.invalid_dists_bookworm_main_binary-amd64_Packages").write_text("x")
    monkeypatch.setattr(aptquery, "HOST_APT_STATE", (lists, tmp_path / "sources.list"))
    monkeypatch.setattr(base, "STATE_DIR", tmp_path / "state")
    (tmp_path / "state").mkdir()
    monkeypatch.setattr(aptquery.shutil, "which", lambda name: f"/usr/bin/{name}")
    runs: list[str] = []

    def run(argv: list[str], **_: object) -> types.SimpleNamespace:
        runs.append(argv[1])
        return types.SimpleNamespace(stdout=POLICY if argv[1] == "policy" else MADISON)

    monkeypatch.setattr(process, "run", run)

    def new_run() -> dict[str, bool]:  # what a new dockerarch process starts from
        monkeypatch.setattr(aptquery, "_HOST_APT", {})
        aptquery._host_suites.cache_clear()
        aptquery._host_apt_memo.cache_clear()
        return aptquery.host_apt_has_all(["gcc-12-aarch64-linux-gnu", "python3"], "bookworm")

    try:
        assert new_run() == {"gcc-12-aarch64-linux-gnu": True, "python3": False}
        assert runs == ["policy", "madison"]
        assert new_run() == {"gcc-12-aarch64-linux-gnu": True, "python3": False}
        assert runs == ["policy", "madison"]  # from the state directory
        (tmp_path / "sources.list").write_text(
            "deb http://deb.example.invalid/debian trixie main\n"
        )
        assert new_run()["gcc-12-aarch64-linux-gnu"] is True
        assert runs == ["policy", "madison"] * 2  # the sources changed: asked again
    finally:
        aptquery._host_suites.cache_clear()
        aptquery._host_apt_memo.cache_clear()


def test_the_toolchain_log_is_counted() -> None:
    log = ("x86_64 aarch64-linux-gnu-gcc compile dash\n"
           "x86_64 aarch64-linux-gnu-gcc other aarch64-binfmt-P\n"
           "aarch64 cc compile qemu-aarch64-static\n\nx86_64 cc compile\n")  # fmt: skip
    assert accel.count_runs(log) == {
        "runs": 3, "compiles": 2, "native": 2, "emulated": 1,
        "started_by_native": 1, "started_by_emulated": 2,
    }  # fmt: skip
    assert accel.count_runs("") == {
        "runs": 0, "compiles": 0, "native": 0, "emulated": 0,
        "started_by_native": 0, "started_by_emulated": 0,
    }  # fmt: skip


def test_the_emulated_programs_that_started_compiler_runs_are_named_most_first() -> None:
    log = ("x86_64 arm-linux-gnueabihf-gcc compile arm-binfmt-P:cmake\n"
           "x86_64 cc compile arm-binfmt-P:sh\nx86_64 cc compile dash\n"
           "x86_64 cc compile qemu-arm-static:sh\nx86_64 cc other arm-binfmt-P\n")  # fmt: skip
    assert list(accel.emulated_starters(log).items()) == [("sh", 2), ("cmake", 1), ("?", 1)]
    assert accel.emulated_starters("x86_64 cc compile ninja\n") == {}


def test_the_drivers_report_is_read_and_said() -> None:
    report = accel.DriverReport.parse(
        "native dash 0.5.12-2 dash\nnative cmake 3.25.1-1 cmake ctest cpack\n"
        "emulated ninja-build the build stage has version 1.12.1-1, the native toolchain 1.11.1-1\n"
        "garbage\n"
    )
    assert report.native == {"dash": "0.5.12-2", "cmake": "3.25.1-1"}
    assert report.emulated == {
        "ninja-build": "the build stage has version 1.12.1-1, the native toolchain 1.11.1-1"
    }
    assert report.lines() == [
        "native build driver: dash 0.5.12-2, cmake 3.25.1-1",
        "ninja-build stays emulated: the build stage has version 1.12.1-1, the native toolchain 1.11.1-1",
    ]


def test_native_drivers_follow_the_recipe_and_the_mode() -> None:
    # opencv installs cmake and ninja: they drive natively, with make and the shell.
    assert accel.native_drivers(RECIPES["opencv"]) == ("dash", "make", "cmake", "ninja-build")
    assert accel.native_drivers(RECIPES["wheel"]) == ("dash", "make")
    hybrid = _decide("debian-armv7", recipe="opencv").toolchain
    assert hybrid is not None and hybrid.drivers == ("dash", "make", "cmake", "ninja-build")
    assert {"make", "cmake", "ninja-build"} <= set(hybrid.packages)  # the x86-64 builds
    assert hybrid.use_drivers == ("dash", "make", "cmake", "ninja-build", "python3.11-minimal")
    compilers = _decide("debian-armv7", recipe="opencv", requested="compilers")
    assert compilers.accel == "hybrid" and compilers.toolchain is not None
    assert compilers.toolchain.drivers == compilers.toolchain.use_drivers == ()
    # One toolchain per target: what it carries does not depend on the recipe or the mode.
    wheel = _decide("debian-armv7", recipe="wheel").toolchain
    assert wheel is not None and wheel.use_drivers == ("dash", "make", "python3.11-minimal")
    assert hybrid.packages == compilers.toolchain.packages == wheel.packages
    assert hybrid.image_python32 and wheel.python32 and not compilers.toolchain.python32
    # pynq-z1's Python (Ubuntu's 3.10) is not the toolchain suite's (bookworm's 3.11): nothing
    # of the interpreter is carried or used, and the backends stay emulated.
    ubuntu = _decide("pynq-z1", recipe="wheel").toolchain
    assert ubuntu is not None and not ubuntu.image_python and not ubuntu.image_python32
    assert not ubuntu.native_backend and ubuntu.use_drivers == ("dash", "make")


def test_unknown_mode_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="--accel fast is not a mode"):
        accel.check_mode("fast")


TRIXIE = (
    "targets:\n"
    "  trixie-amd64: {extends: debian-amd64, suite: trixie, gcc: 14, python: '3.13'}\n"
    "  trixie-aarch64:\n"
    "    extends: debian-aarch64\n    suite: trixie\n    gcc: 14\n    python: '3.13'\n"
    "    toolchain: trixie-amd64\n"
)


def test_a_newer_suites_target_takes_its_cross_compilers_from_its_own_amd64_target(
    tmp_path: Path,
) -> None:
    (tmp_path / "targets.yaml").write_text(TRIXIE)
    targets = load_targets(tmp_path / "targets.yaml")
    target = targets["trixie-aarch64"]
    base = accel.toolchain_base(target, targets)
    assert base.name == "trixie-amd64" and base.suite == "trixie"
    asked: list[tuple[str, str]] = []
    decision = accel.decide(
        target, RECIPES["wheel"], requested="hybrid", route_accel="qemu", toolchain_base=base,
        cross_available=lambda package, suite: asked.append((package, suite)) is None,
    )  # fmt: skip
    assert decision.toolchain is not None
    assert decision.toolchain.base_image == "dockerarch/base/trixie-amd64:trixie"
    assert decision.toolchain.packages[0] == "gcc-14-aarch64-linux-gnu"
    assert ("gcc-14-aarch64-linux-gnu", "trixie") in asked  # asked of trixie, not bookworm
    # Targets that name none keep bookworm's amd64 base.
    assert accel.toolchain_base(targets["debian-armv7"], targets) == AMD64


@pytest.mark.parametrize(
    ("toolchain", "message"),
    [("trixie-amd46", "which is not a target"), ("debian-armv7", "is an armv7 target")],
)
def test_a_toolchain_that_is_not_an_amd64_target_is_a_clear_error(
    tmp_path: Path, toolchain: str, message: str
) -> None:
    (tmp_path / "targets.yaml").write_text(
        TRIXIE.replace("toolchain: trixie-amd64", f"toolchain: {toolchain}")
    )
    targets = load_targets(tmp_path / "targets.yaml")
    with pytest.raises(ConfigError) as caught:
        accel.toolchain_base(targets["trixie-aarch64"], targets)
    assert message in caught.value.message and "toolchain:" in (caught.value.fix or "")


def test_amd64_builds_natively_here_and_grafts_nothing() -> None:
    assert _decide("debian-amd64", route="native") == accel.Decision(accel="native")
    assert _decide("debian-amd64") == accel.Decision(accel="qemu")  # a foreign host's QEMU


def test_torchs_generators_run_in_the_native_python_of_the_targets_version() -> None:
    toolchain = _decide("debian-armv7", recipe="torch").toolchain
    assert toolchain is not None and "torchgen.gen" in toolchain.native_python
    assert toolchain.python_package == "python3.11-minimal"
    assert "python3-yaml" in toolchain.packages  # torchgen's YAML, the x86-64 C loader
    compilers = _decide("debian-armv7", recipe="torch", requested="compilers").toolchain
    assert compilers is not None and compilers.native_python == ()
    assert "python3.11-minimal" not in compilers.use_drivers  # carried, not used


def test_generator_runs_and_native_wheels_are_reported() -> None:
    report = accel.DriverReport.parse(
        "native python3.13-minimal 3.13.5-2 python-native\n"
        "native-wheel cmake 4.4.4\nnative-wheel cmake 4.4.4\n"
        "native-python torchgen.gen\nnative-python torchgen.gen\n"
        "native-python tools/setup_helpers/generate_code.py\n"
    )
    assert report.native == {"python3.13-minimal": "3.13.5-2", "cmake (PyPI wheel)": "4.4.4"}
    assert report.generators == {"torchgen.gen": 2, "tools/setup_helpers/generate_code.py": 1}
    assert report.lines()[-1] == (
        "native code generators: torchgen.gen (2 runs), tools/setup_helpers/generate_code.py (1 run)"
    )


def test_ccaches_stats_log_says_what_came_from_the_cache() -> None:
    log = (
        "# a.c\ncache_miss\ndirect_cache_miss\nlocal_storage_write\npreprocessed_cache_miss\n"
        "# a.c\ndirect_cache_hit\nlocal_storage_hit\n"
        "# b.c\ndirect_cache_miss\npreprocessed_cache_hit\n"
        "# \ncalled_for_link\n"
    )
    none = {"remote_hits": 0, "sent": 0, "remote_errors": 0, "remote_skipped": 0}
    assert accel.count_ccache(log) == {"hits": 2, "misses": 1, "uncached": 1, **none}
    assert accel.count_ccache("") == {"hits": 0, "misses": 0, "uncached": 0, **none}


def test_the_shared_caches_hits_sends_and_failures_are_counted() -> None:
    # ccache 4.7's stats_log with remote storage, as it wrote it against nginx here: a miss
    # that sent its result and manifest, a remote hit, a compile whose server refused
    log = (
        "# a.c\ncache_miss\ndirect_cache_miss\nlocal_storage_miss\nlocal_storage_write\n"
        "preprocessed_cache_miss\nremote_storage_miss\nremote_storage_read_miss\n"
        "remote_storage_write\nremote_storage_write\n"
        "# a.c\ndirect_cache_hit\nlocal_storage_miss\nlocal_storage_write\nremote_storage_hit\n"
        "remote_storage_read_hit\n"
        "# b.c\ncache_miss\ndirect_cache_miss\nlocal_storage_write\npreprocessed_cache_miss\n"
        "remote_storage_error\nremote_storage_miss\n"
        "# c.c\ndirect_cache_hit\nlocal_storage_hit\n"
    )
    assert accel.count_ccache(log) == {"hits": 2, "misses": 2, "uncached": 0, "remote_hits": 1,
                                       "sent": 2, "remote_errors": 1, "remote_skipped": 0}  # fmt: skip


def test_compiles_after_the_shared_cache_failed_are_counted_apart_from_ccaches_runs() -> None:
    # dockerarch-cc's block for a compile it ran without the shared cache (it failed this build
    # earlier), beside that compile's own block from ccache
    log = (
        "# a.c\ncache_miss\ndirect_cache_miss\nlocal_storage_write\nremote_storage_error\n"
        "# dockerarch-cc\nremote_storage_skipped\n"
        "# b.c\ncache_miss\ndirect_cache_miss\nlocal_storage_write\n"
        "# dockerarch-cc\nremote_storage_skipped\n"
        "# c.c\ndirect_cache_hit\nlocal_storage_hit\n"
    )
    assert accel.count_ccache(log) == {"hits": 1, "misses": 2, "uncached": 0, "remote_hits": 0,
                                       "sent": 0, "remote_errors": 1, "remote_skipped": 2}  # fmt: skip

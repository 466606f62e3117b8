"""The native reading of what installed artifacts need (data/toolchain/dockerarch_needs.py):
glibc's search followed over shared objects made in memory, in a root directory written here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from dockerarch import libneeds, paths

from .elfbytes import ld_so_cache, shared_object

MULTIARCH = "usr/lib/aarch64-linux-gnu"
SITE = "usr/local/lib/python3.11/dist-packages"


def _module() -> ModuleType:
    path = paths.data_path("toolchain") / "dockerarch_needs.py"
    spec = importlib.util.spec_from_file_location("dockerarch_needs", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


NEEDS = _module()


def put(root: Path, path: str, data: bytes) -> str:
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return "/" + path


def missing(root: Path, path: str, environ: dict[str, str] | None = None) -> list[str]:
    return list(NEEDS.Reader(str(root), environ or {}).not_found(path))


def test_the_default_directories_answer_and_what_none_has_is_missing(tmp_path: Path) -> None:
    put(tmp_path, f"{MULTIARCH}/libstdc++.so.6", shared_object(needed=("libm.so.6",)))
    put(tmp_path, "lib/aarch64-linux-gnu/libm.so.6", shared_object())
    ext = put(tmp_path, "opt/ext.so", shared_object(needed=("libstdc++.so.6", "libgomp.so.1")))
    assert missing(tmp_path, ext) == ["libgomp.so.1"]


def test_what_is_not_an_elf_file_or_not_there_needs_nothing(tmp_path: Path) -> None:
    script = put(tmp_path, "usr/lib/aarch64-linux-gnu/libc.so", b"/* GNU ld script */\n")
    assert missing(tmp_path, script) == [] and missing(tmp_path, "/opt/absent.so") == []


def test_runpath_is_only_the_needing_object_s_own_and_names_already_loaded_answer(
    tmp_path: Path,
) -> None:
    """auditwheel's layout: the extension's RUNPATH $ORIGIN/../pkg.libs holds liba and libb;
    liba needs libb but has no RUNPATH of its own: found only because the extension loaded it
    first, under that name (ld.so's breadth-first order)."""
    put(tmp_path, f"{SITE}/pkg.libs/liba.so", shared_object(needed=("libb.so",)))
    put(tmp_path, f"{SITE}/pkg.libs/libb.so", shared_object(soname="libb.so"))
    both = put(tmp_path, f"{SITE}/pkg/both.so",
               shared_object(needed=("liba.so", "libb.so"), runpath="$ORIGIN/../pkg.libs"))  # fmt: skip
    only_a = put(tmp_path, f"{SITE}/pkg/only_a.so",
                 shared_object(needed=("liba.so",), runpath="${ORIGIN}/../pkg.libs"))  # fmt: skip
    assert missing(tmp_path, both) == []
    assert missing(tmp_path, only_a) == ["libb.so"]


def test_rpath_is_inherited_by_what_it_loads_unless_runpath_is_there(tmp_path: Path) -> None:
    put(tmp_path, "opt/app/lib/lib1.so", shared_object(needed=("lib2.so",)))
    put(tmp_path, "opt/app/lib/lib2.so", shared_object())
    old = put(tmp_path, "opt/app/old.so", shared_object(needed=("lib1.so",), rpath="$ORIGIN/lib"))
    new = put(tmp_path, "opt/app/new.so", shared_object(needed=("lib1.so",), runpath="$ORIGIN/lib"))
    # both: DT_RPATH is ignored when DT_RUNPATH is there
    both = put(tmp_path, "opt/app/both.so",
               shared_object(needed=("lib1.so",), rpath="/nowhere", runpath="$ORIGIN/lib"))  # fmt: skip
    assert missing(tmp_path, old) == []
    assert missing(tmp_path, new) == ["lib2.so"]
    assert missing(tmp_path, both) == ["lib2.so"]


def test_a_library_of_another_machine_or_float_abi_is_passed_over(tmp_path: Path) -> None:
    put(tmp_path, "opt/first/libz.so.1", shared_object("armhf"))
    put(tmp_path, "opt/second/libz.so.1", shared_object("aarch64"))
    ext = put(tmp_path, "opt/ext.so", shared_object(needed=("libz.so.1",), runpath="/opt/first"))
    assert missing(tmp_path, ext) == ["libz.so.1"]
    ext = put(tmp_path, "opt/ext2.so",
              shared_object(needed=("libz.so.1",), runpath="/opt/first:/opt/second"))  # fmt: skip
    assert missing(tmp_path, ext) == []
    put(tmp_path, "usr/lib/arm-linux-gnueabihf/libfoo.so", shared_object("armel"))
    arm = put(tmp_path, "opt/arm.so", shared_object("armhf", needed=("libfoo.so",)))
    assert missing(tmp_path, arm) == ["libfoo.so"]  # soft-float: not for an armhf file


def test_ld_so_cache_and_ld_library_path_are_read_and_nodeflib_skips_the_system(
    tmp_path: Path,
) -> None:
    put(tmp_path, "opt/odd/libodd.so.1", shared_object())
    ext = put(tmp_path, "opt/ext.so", shared_object(needed=("libodd.so.1",)))
    assert missing(tmp_path, ext) == ["libodd.so.1"]
    assert missing(tmp_path, ext, {"LD_LIBRARY_PATH": "/x:/opt/odd"}) == []
    put(tmp_path, "etc/ld.so.cache", ld_so_cache([("libodd.so.1", "/opt/odd/libodd.so.1")]))
    assert missing(tmp_path, ext) == []
    put(tmp_path, f"{MULTIARCH}/libc.so.6", shared_object())
    strict = put(tmp_path, "opt/strict.so",
                 shared_object(needed=("libodd.so.1", "libc.so.6"), flags_1=0x800))  # fmt: skip
    assert missing(tmp_path, strict) == ["libodd.so.1", "libc.so.6"]


def test_the_report_locates_wheel_members_and_says_what_another_wheel_carries(
    tmp_path: Path,
) -> None:
    info = tmp_path / SITE / "omp_demo-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: omp_demo\nVersion: 1.0\n")
    put(tmp_path, f"{SITE}/torch/lib/libc10.so", shared_object())
    ext = put(tmp_path, f"{SITE}/omp_demo/_omp.so",
              shared_object(needed=("libgomp.so.1", "libc10.so")))  # fmt: skip
    tool = put(tmp_path, "usr/local/lib/libtool.so.1", shared_object(needed=("libgomp.so.1",)))
    files = {"wheels": [["omp-demo", "omp_demo/_omp.so"]], "paths": [tool]}
    lines = NEEDS.report(files, str(tmp_path), {})
    assert lines == [
        f"dockerarch-needs: {tool} libgomp.so.1",
        f"dockerarch-needs: {ext} libgomp.so.1",
        f"dockerarch-needs-wheel: {ext} libc10.so /{SITE}/torch/lib/libc10.so",
    ]
    # the lines are the emulated ldd pipeline's: dockerarch reads them the same way
    found = libneeds.parse("\n".join(lines), [])
    assert [(m.path, m.soname) for m in found] == [(tool, "libgomp.so.1"), (ext, "libgomp.so.1")]


@pytest.mark.parametrize(
    ("files", "reason"),
    [({"wheels": [["absent", "absent/x.so"]]}, "absent is not installed"),
     ({"paths": ["/opt/p.so"]}, "$PLATFORM/x names a token other than $ORIGIN")],
)  # fmt: skip
def test_what_it_cannot_read_as_the_loader_would_it_leaves_to_ldd(
    files: dict[str, list[str]], reason: str, tmp_path: Path
) -> None:
    put(tmp_path, "opt/p.so", shared_object(needed=("libq.so",), runpath="$PLATFORM/x"))
    (line,) = NEEDS.report(files, str(tmp_path), {})
    assert libneeds.undecided(line) is not None and reason in line


def test_a_report_read_from_a_build_s_log_is_the_whole_report_of_one_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The runtime stage's step prints the report into buildx's log, ending with how many lines
    it had: dockerarch takes it from there only whole, and only from the step that ended it."""
    put(tmp_path, "opt/ext.so", shared_object(needed=("libgomp.so.1",)))
    files = tmp_path / "files.json"
    files.write_text('{"paths": ["/opt/ext.so"]}')
    printed = NEEDS.report({"paths": ["/opt/ext.so"]}, str(tmp_path), {})
    assert printed == ["dockerarch-needs: /opt/ext.so libgomp.so.1"]
    # main (which reads the image it runs in: here this machine's /) ends with the count
    assert NEEDS.main(["dockerarch_needs.py", str(files)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == f"{NEEDS.END} {len(out) - 1}"
    step = ("#20 [runtime 2/2] RUN --mount=type=bind,from=needs-files,target=/run/dockerarch-needs"
            "     { [ -z \"\" ] || { ...; }; } && { [ ! -s /run/dockerarch-needs/files.json ]"
            "         || sh /run/dockerarch/native-needs /run/dockerarch-native"
            " /run/dockerarch-needs/files.json; }")  # fmt: skip
    log = [
        "#19 [runtime 1/2] RUN sh /run/dockerarch/pip-install ...",
        "#19 0.410 dockerarch-needs-end: 0",  # another step's words: not the report
        step,
        "#20 0.301 dockerarch-needs: /opt/ext.so libgomp.so.1",
        "#20 0.302 dockerarch-needs-wheel: /opt/ext.so libc10.so /x/torch/lib/libc10.so",
        "#20 0.305 dockerarch-needs-end: 2",
        "#20 DONE 0.4s",
    ]
    assert libneeds.report_in_log(log) == (
        "dockerarch-needs: /opt/ext.so libgomp.so.1\n"
        "dockerarch-needs-wheel: /opt/ext.so libc10.so /x/torch/lib/libc10.so\n"
    )
    assert libneeds.report_in_log([step, "#20 0.3 dockerarch-needs-end: 0"]) == ""  # all found
    # a clipped log (a line lost), the step from the cache (no report), no end, and a report
    # without the step's title (another step's): none at all
    assert libneeds.report_in_log([step, log[3], log[5]]) is None
    assert libneeds.report_in_log([step, "#20 CACHED"]) is None
    assert libneeds.report_in_log(log[:5]) is None
    assert libneeds.report_in_log(log[:2] + log[3:]) is None

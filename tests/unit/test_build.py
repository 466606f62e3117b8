"""The parts of `dockerarch build` that need no engine: reading buildx's progress, naming
results, local source packages, replacing a result."""

from __future__ import annotations

from pathlib import Path

import pytest

from dockerarch import build, steps
from dockerarch.errors import UsageError
from dockerarch.files import replace_dir
from dockerarch.recipes import declared_compilers, parse_package_spec

LOG = """\
#1 [internal] load build definition from Dockerfile
#1 DONE 0.0s
#5 [build 2/4] RUN apt-get update
#5 CACHED
#6 [build 3/4] RUN mkdir -p /out
#6 0.112 made
#6 DONE 0.3s
#7 [build 4/4] RUN python3 -m pip wheel --wheel-dir /out /src/package
#7 1.20 Processing /src/package
#7 9.81 error: command 'arm-linux-gnueabihf-gcc' failed
#7 ERROR: process "/bin/sh -c python3 -m pip wheel" did not complete successfully: exit code: 1
"""


def test_progress_follows_working_steps_and_finds_the_failing_one() -> None:
    tracker = steps.StepTracker()
    announced = [tracker.current for line in LOG.splitlines() if tracker.feed(line)]
    assert announced == ["[build 3/4] RUN mkdir -p /out",
                         "[build 4/4] RUN python3 -m pip wheel --wheel-dir /out /src/package"]  # fmt: skip
    step, tail = tracker.failure_report()
    assert step == "[build 4/4] RUN python3 -m pip wheel --wheel-dir /out /src/package"
    assert tail[-2] == "#7 9.81 error: command 'arm-linux-gnueabihf-gcc' failed"
    assert all(line.startswith("#7 ") for line in tail)


NINJA_LOG = """\
#18 [build 7/8] RUN cmake --build /src/x/build
#18 0.512 [1/1217] Building CXX object c10/CMakeFiles/c10.dir/core/Allocator.cpp.o
#19 [runtime-base 2/2] RUN apt-install
#19 0.100 [3/9] something else's count
#18 0.7 [412/1217] Building CXX object caffe2/CMakeFiles/torch_cpu.dir/x.cpp.o
#18 0.9 [ 45%] Building C object CMakeFiles/hello.dir/hello.c.o
#18 1.0 [0/0] nothing
#18 1.1 building [1/2] in the middle of a line
#18 1.2   [413/1217] Building CXX object x.cpp.o (pip -v indents its backend's lines)
"""


def _counts(log: str) -> tuple[steps.StepTracker, list[tuple[int, int, str]]]:
    """The tracker after ``log``, and every count it took from it, in order."""
    tracker = steps.StepTracker()
    counts = []
    for line in log.splitlines():
        tracker.feed(line)
        counts.append(tracker.count(line))
    return tracker, [c for c in counts if c]


def test_a_compile_step_says_how_far_it_is() -> None:
    tracker, counts = _counts(NINJA_LOG)
    assert counts == [(1, 1217, "1/1217"), (3, 9, "3/9"),
                                         (412, 1217, "412/1217"), (45, 100, "45%"),
                                         (413, 1217, "413/1217")]  # fmt: skip
    # A count of a step that is not the one shown now (a stage running beside it) is not taken.
    assert tracker.count("#19 0.200 [4/9] something else's count") is None


SETUPTOOLS_LOG = """\
#25 [build 11/12] RUN python3 setup.py bdist_wheel --dist-dir /out
#25 0.1 building 'torchvision._C' extension
#25 0.1 aarch64-linux-gnu-g++ -march=armv8-a -O2 -fPIC -I/src/vision/torchvision/csrc -c /src/vision/torchvision/csrc/vision.cpp -o build/temp/vision.o -std=c++17
#25 0.1 /usr/lib/dockerarch/bin/aarch64-linux-gnu-gcc -O2 -fPIC -c a.c -o build/a.o
#25 0.1 gcc-14 -O2 -c b.c -o b.o
#25 0.1 aarch64-linux-gnu-g++ -shared build/temp/vision.o -o build/lib/torchvision/_C.so
#25 0.1 checking whether gcc -c works... yes
#26 0.1 cc -c other.c -o other.o
"""


def test_a_compile_step_without_a_count_says_how_many_files_it_compiled() -> None:
    """setuptools and plain Makefiles print each compiler command: each that compiles one source
    (-c) is counted, with no total; links and configure checks are not."""
    _, counts = _counts(SETUPTOOLS_LOG)
    assert counts == [(1, 0, "1 file compiled"), (2, 0, "2 files compiled"),
                                         (3, 0, "3 files compiled")]  # fmt: skip


def test_a_local_source_tree_is_a_package(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "tiny-ext"\nversion = "1.2"\n')
    spec = parse_package_spec(str(tmp_path))
    assert (spec.name, spec.version, spec.local, spec.dist_name) == (
        "tiny-ext",
        "1.2",
        tmp_path,
        "tiny_ext",
    )


def test_an_unpacked_setup_py_sdist_is_named_by_its_pkg_info(tmp_path: Path) -> None:
    (tmp_path / "setup.py").write_text("from setuptools import setup\nsetup()\n")
    (tmp_path / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools"]\n')
    (tmp_path / "PKG-INFO").write_text(
        "Metadata-Version: 2.1\nName: zstandard\nVersion: 0.23.0\n\nlong text\n"
    )
    spec = parse_package_spec(str(tmp_path))
    assert (spec.name, spec.version, spec.local) == ("zstandard", "0.23.0", tmp_path)


@pytest.mark.parametrize(
    ("pyproject", "message"),
    [(None, "without a pyproject.toml or setup.py"), ('[project]\nname = "x"\ndynamic = ["version"]\n',
      "names no static version"), ("[project", "is not valid TOML")],
)  # fmt: skip
def test_bad_local_sources_are_refused(pyproject: str | None, message: str, tmp_path: Path) -> None:
    if pyproject is not None:
        (tmp_path / "pyproject.toml").write_text(pyproject)
    with pytest.raises(UsageError, match=message):
        parse_package_spec(str(tmp_path))


@pytest.mark.parametrize(
    ("name", "text", "found"),
    [
        # scipy 1.17's meson.build, its project() line names only C, C++ and Cython
        ("meson.build", "project('scipy', 'c', 'cpp', 'cython',\n  version: '1.17.1')\n"
         "add_languages('fortran', native: false)\n", "meson.build: add_languages('fortran', native: false)"),
        ("meson.build", "project('m', 'c', 'fortran', version: '1.0')\n", "meson.build: project('m', 'c', 'fortran', version: '1.0')"),
        ("meson.build", "project('m', 'c')\nif add_languages('fortran', required: false)\nendif\n", None),
        ("meson.build", "project('m', 'c')\n# add_languages('fortran')\n", None),
        ("CMakeLists.txt", "cmake_minimum_required(VERSION 3.15)\nproject(x LANGUAGES C Fortran)\n", "CMakeLists.txt: project(x LANGUAGES C Fortran)"),
        ("CMakeLists.txt", "project(x C)\nENABLE_LANGUAGE(Fortran)\n", "CMakeLists.txt: ENABLE_LANGUAGE(Fortran)"),
        ("CMakeLists.txt", "project(x C)\nenable_language(Fortran OPTIONAL)\n", None),
        ("CMakeLists.txt", "project(lightgbm LANGUAGES C CXX)\n", None),
    ],
)  # fmt: skip
def test_a_tree_s_build_system_names_the_compilers_it_needs_beyond_c(
    name: str, text: str, found: str | None, tmp_path: Path
) -> None:
    """A native or plain-QEMU build stage has gcc and g++ only: scipy's meson.build asks for
    Fortran, so its build stage needs gfortran (without it: meson's 'Unknown compiler(s)')."""
    (tmp_path / name).write_text(text)
    assert declared_compilers(tmp_path) == ({"gfortran": found} if found else {})


def test_fortran_sources_a_build_does_not_declare_are_not_a_need(tmp_path: Path) -> None:
    """numpy's sdist carries Fortran in f2py's documentation and tests and in meson's own test
    cases (each with a meson.build asking for Fortran): only the top-level file is the build's."""
    for sub in ("doc/source/f2py/code", "vendored-meson/meson/test cases/fortran/1 basic"):
        (tmp_path / sub).mkdir(parents=True)
        (tmp_path / sub / "meson.build").write_text("project('t', 'fortran')\n")
        (tmp_path / sub / "add.f").write_text("      subroutine add\n      end\n")
    (tmp_path / "meson.build").write_text("project('NumPy', 'c', 'cpp', 'cython')\n")
    assert declared_compilers(tmp_path) == {}


def test_a_new_result_replaces_the_old_one_whole(tmp_path: Path) -> None:
    final, new = tmp_path / "zstandard-0.23.0", tmp_path / ".new"
    final.mkdir()
    (final / "old.whl").write_text("old")
    new.mkdir()
    (new / "new.whl").write_text("new")
    replace_dir(new, final)
    assert [p.name for p in final.iterdir()] == ["new.whl"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["zstandard-0.23.0"]


def test_a_cached_step_whose_log_buildkit_replays_is_not_announced() -> None:
    now = [100.0]
    tracker = steps.StepTracker(clock=lambda: now[0])
    replay = [
        "#3 [toolchain-stage 2/4] RUN apt-get install -y --no-install-recommends gcc",
        "#3 0.101 Reading package lists...",  # early lines of a replay look like work...
        "#3 16.52 Setting up gcc (4:12.2.0-3) ...",  # ...until a stamp the clock cannot reach
        "#3 DONE 16.7s",
    ]
    assert [tracker.feed(line) for line in replay] == [False, True, False, False]
    # The same step run for real: its stamps keep pace with the clock.
    tracker = steps.StepTracker(clock=lambda: now[0])
    tracker.feed(replay[0])
    now[0] += 17.0
    assert tracker.feed(replay[2]) is True


def _torchvision(version: str = "0.18.1"):  # type: ignore[no-untyped-def]
    from dockerarch.render import plan

    (request,) = plan("torchvision", arch=None, target="debian-aarch64", version=version,
                      package=None, settings={})  # fmt: skip
    return request


def test_torchvision_takes_the_torch_result_of_its_target(tmp_path: Path) -> None:
    wheels = tmp_path / "debian-aarch64" / "torch-2.3.1"
    wheels.mkdir(parents=True)
    (wheels / "torch-2.3.1-cp311-cp311-linux_aarch64.whl").write_bytes(b"PK")
    found = build.resolve_uses(_torchvision(), build.BuildOptions(out=tmp_path))
    assert found == {"torch-wheels": wheels.resolve()}


def test_a_missing_torch_result_says_which_build_makes_it(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as caught:
        build.resolve_uses(_torchvision("0.24.1"), build.BuildOptions(out=tmp_path))
    text = caught.value.render()
    assert "dockerarch build torch --version 2.9.1 --target debian-aarch64" in " ".join(
        text.split()
    )
    assert "--use torch-wheels=DIR" in " ".join(text.split())


def test_use_names_a_directory_instead_and_only_contexts_the_recipe_takes(tmp_path: Path) -> None:
    wheels = tmp_path / "pypi"
    wheels.mkdir()
    (wheels / "torch-2.9.1-cp311-cp311-manylinux_2_28_aarch64.whl").write_bytes(b"PK")
    options = build.BuildOptions(out=tmp_path / "dist", uses={"torch-wheels": wheels})
    assert build.resolve_uses(_torchvision("0.24.1"), options) == {"torch-wheels": wheels.resolve()}
    empty = build.BuildOptions(out=tmp_path, uses={"torch-wheels": tmp_path / "nothing"})
    with pytest.raises(UsageError, match="names no directory holding files"):
        build.resolve_uses(_torchvision(), empty)
    stray = build.BuildOptions(out=tmp_path, uses={"torch-wheels": wheels, "numpy-wheels": wheels})
    with pytest.raises(UsageError, match="numpy-wheels"):
        build.resolve_uses(_torchvision(), stray)


def test_the_engines_own_platform_builds_natively_on_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from dockerarch import builders

    monkeypatch.setattr("platform.machine", lambda: "x86_64")
    route = builders.route("linux/amd64", forced=None, fallback_qemu=False)
    assert (route.builder, route.accel, route.context) == ("local", "native", None)


@pytest.mark.parametrize(
    ("line", "clipped"),
    [
        ("#25 3152.7 [output clipped, log limit 2MiB reached]", True),
        ("#9 0.087 [output clipped, log limit 100KiB/s reached]", True),
        ("#25 3152.7 [606/1326] /usr/lib/dockerarch/bin/arm-linux-gnueabihf-g++ -c x.cpp", False),
        ("#25 1.0 echo '[output clipped, log limit 2MiB reached]'", False),
    ],
)
def test_a_step_log_the_engine_clipped_is_recognised(line: str, clipped: bool) -> None:
    assert bool(steps.CLIPPED.search(line)) is clipped


def test_each_queue_starts_its_next_job_when_its_own_last_one_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two targets' queues (a wheel set's members): armv7's second build starts while aarch64's
    first is still running, and each feed gets the result of its own last job."""
    import threading
    from types import SimpleNamespace

    second_started = threading.Event()
    ran: list[str] = []

    def plan(requests: list[object], options: object, progress: object) -> list[tuple[object, dict[str, Path]]]:  # fmt: skip
        return [(SimpleNamespace(request=r), {}) for r in requests]

    def run(job: SimpleNamespace, uses: object, progress: object) -> build.JobResult:
        name = str(job.request)
        ran.append(name)
        if name == "armv7 zstandard":
            second_started.set()
        if name == "aarch64 zstandard":  # ends only once armv7's second build has started
            assert second_started.wait(10), "armv7's next build waited for aarch64's"
        return build.JobResult(target=name)

    monkeypatch.setattr(build, "_plan_jobs", plan)
    monkeypatch.setattr(build, "_run_job", run)
    seen: dict[str, list[str | None]] = {"armv7": [], "aarch64": []}

    def feed(arch: str, names: list[str]) -> build.Feed:
        def next_request(result: build.JobResult | None) -> object:
            seen[arch].append(result.target if result else None)
            return f"{arch} {names.pop(0)}" if names else None

        return next_request  # type: ignore[return-value]

    feeds = [feed("armv7", ["cffi", "zstandard"]), feed("aarch64", ["zstandard"])]
    build.run_queues(feeds, None, None)  # type: ignore[arg-type]
    assert sorted(ran) == ["aarch64 zstandard", "armv7 cffi", "armv7 zstandard"]
    assert seen == {"armv7": [None, "armv7 cffi", "armv7 zstandard"],
                    "aarch64": [None, "aarch64 zstandard"]}  # fmt: skip


def test_an_exception_in_a_feed_ends_the_run_after_the_other_feeds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from types import SimpleNamespace

    monkeypatch.setattr(
        build, "_plan_jobs", lambda rs, o, p: [(SimpleNamespace(request=r), {}) for r in rs]
    )
    monkeypatch.setattr(
        build, "_run_job", lambda job, u, p: build.JobResult(target=str(job.request))
    )
    done: list[str] = []

    def broken(result: object) -> object:
        raise UsageError("a feed failed", fix="none")

    def fine(result: build.JobResult | None) -> object:
        if result is not None:
            done.append(result.target)
            return None
        return "aarch64 zstandard"

    with pytest.raises(UsageError, match="a feed failed"):
        build.run_queues([broken, fine], None, None)  # type: ignore[list-item, arg-type]
    assert done == ["aarch64 zstandard"]


def test_a_context_from_another_result_goes_to_buildx_as_a_view_of_the_builds_own(
    tmp_path: Path,
) -> None:
    """buildx sends a context into what it kept of the last one of the same directory name and
    skips files of the same size and mtime: torch's result directory, rebuilt, would keep its
    name. The build hands buildx a hard-linked view named for this build instead."""
    import io

    from dockerarch import accel, builders, buildsteps
    from dockerarch.files import context_name

    torch = tmp_path / "dist" / "debian-aarch64" / "torch-2.3.1"
    torch.mkdir(parents=True)
    wheel = torch / "torch-2.3.1-cp311-cp311-linux_aarch64.whl"
    wheel.write_bytes(b"PK")
    work = tmp_path / "work"
    work.mkdir()
    route = builders.Route(builder=builders.LOCAL, context=None, endpoint="unix:///x", accel="qemu")
    state = buildsteps.JobState(
        request=_torchvision("0.18.1"), route=route, decision=accel.Decision(accel="none"),
        options=build.BuildOptions(out=tmp_path / "dist"), engine=None,  # type: ignore[arg-type]
        work=work, log=io.StringIO(), say=lambda _s: None, step=lambda _s: None,
        count=lambda *_a: None, contexts={"torch-wheels": str(torch)},
    )  # fmt: skip
    buildsteps.prepare_context(state)
    view = Path(state.contexts["torch-wheels"])
    assert view == work / context_name("torch-wheels", work) and view.name != torch.name
    assert (view / wheel.name).stat().st_ino == wheel.stat().st_ino  # linked, not copied
    assert sorted(p.name for p in view.iterdir()) == [wheel.name]
    assert state.used == {"torch-wheels": str(torch)}  # what manifest.json records under uses

"""``dockerarch build``: the main job."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dockerarch.cli.options import Source
from dockerarch.cli.output import columns

if TYPE_CHECKING:
    from dockerarch.build import BuildOptions, JobResult
    from dockerarch.render import RenderRequest
    from dockerarch.wheelset import SetRequest


def build(
    recipe: Annotated[str, typer.Argument(help="Recipe name (dockerarch recipes lists them).")],
    arch: Annotated[
        str | None,
        typer.Option("--arch", "-a", help="armv7, aarch64, or a comma list: armv7,aarch64."),
    ] = None,
    target: Annotated[
        str | None, typer.Option("--target", "-t", help="Board targets, e.g. rpi3 or rpi3,pynq-zu.")
    ] = None,
    version: Annotated[str | None, typer.Option("--version", "-V", help="Recipe version.")] = None,
    package: Annotated[
        str | None,
        typer.Option(
            "--package", "-p", help="wheel recipe: 'NAME==VERSION', or a source directory."
        ),
    ] = None,
    source: Source = None,
    use: Annotated[
        list[str] | None,
        typer.Option(
            "--use",
            metavar="NAME=DIR",
            help="A context the recipe takes from another build's result (torchvision: "
            "torch-wheels), from DIR instead; repeatable.",
        ),
    ] = None,
    settings: Annotated[
        list[str] | None,
        typer.Option("--set", "-s", metavar="KEY=VALUE", help="Set a recipe option; repeatable."),
    ] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Where results land.")] = Path("dist"),
    builder: Annotated[
        str | None, typer.Option("--builder", help="Force a builder node ('local': this machine).")
    ] = None,
    fallback_qemu: Annotated[
        bool,
        typer.Option("--fallback-qemu", help="Build locally when a native node does not answer."),
    ] = False,
    no_cache: Annotated[
        bool,
        typer.Option(
            "--no-cache",
            help="Cold build: no cached step, and the target's package caches (apt, pip, uv, "
            "ccache) start empty, for later builds too.",
        ),
    ] = False,
    smoke: Annotated[
        bool,
        typer.Option(
            "--smoke/--no-smoke", help="Install and try the artifacts in the runtime image."
        ),
    ] = True,
    accel: Annotated[
        str,
        typer.Option(
            "--accel",
            help="Under QEMU: 'hybrid' compiles with native x86-64 cross compilers and drives the "
            "build with native cmake, ninja, make and sh (several times faster); 'compilers' "
            "keeps the build driver emulated; 'none' emulates everything. Native nodes build "
            "natively either way.",
        ),
    ] = "hybrid",
    ccache: Annotated[
        bool,
        typer.Option("--ccache/--no-ccache", help="Hybrid builds: keep a compiler cache (ccache)."),
    ] = True,
    push: Annotated[
        bool,
        typer.Option(
            "--push",
            help="After every target built and verified, publish them as dockerarch push does.",
        ),
    ] = False,
    farm: Annotated[
        list[str] | None,
        typer.Option(
            "--farm",
            metavar="HOST[:PORT][/SLOTS],...",
            help="Hybrid builds: send compiles to these farm servers (dockerarch farm serve) "
            "through distcc, this machine being one more place; default: registry.yaml's "
            "farm: servers.",
        ),
    ] = None,
    no_farm: Annotated[
        bool,
        typer.Option(
            "--no-farm", help="Compile on this machine only, whatever registry.yaml says."
        ),
    ] = False,
    registry_cache: Annotated[
        bool | None,
        typer.Option(
            "--registry-cache/--no-registry-cache",
            help="Share the build cache through the registry of registry.yaml (default: its "
            "'cache' key). --no-cache still pushes a fresh one.",
        ),
    ] = None,
    requirement: Annotated[
        list[Path] | None,
        typer.Option(
            "--requirement",
            "-r",
            help="wheel recipe: a requirements file; builds the whole set the board needs (every "
            "dependency and build requirement, each built once per target or fetched as a wheel "
            "that fits the board) into OUT/<target>/sets/<name>/; repeatable, mixes with --package.",
        ),
    ] = None,
    constraint: Annotated[
        list[Path] | None,
        typer.Option("--constraint", "-c", help="A constraints file for the set; repeatable."),
    ] = None,
    build_constraint: Annotated[
        list[Path] | None,
        typer.Option(
            "--build-constraint",
            help="With -r: a constraints file for every build environment of the set (not for "
            "what the board installs), as uv's and pip's; repeatable.",
        ),
    ] = None,
    no_deps: Annotated[
        bool,
        typer.Option(
            "--no-deps",
            help="With -r: build only the packages named; what they need must have wheels for "
            "the board (said before anything is built).",
        ),
    ] = False,
    index_url: Annotated[
        str | None,
        typer.Option(
            "--index-url", "-i", help="With -r: the index to resolve from (pip's default)."
        ),
    ] = None,
    extra_index_url: Annotated[
        list[str] | None,
        typer.Option("--extra-index-url", help="With -r: a further index; repeatable."),
    ] = None,
    require_hashes: Annotated[
        bool,
        typer.Option("--require-hashes", help="With -r: every requirement must carry --hash."),
    ] = False,
    set_name: Annotated[
        str | None,
        typer.Option("--name", help="With -r: the set's name (default: the first file's)."),
    ] = None,
    test_requires: Annotated[
        list[str] | None,
        typer.Option(
            "--test-requires",
            metavar="REQ",
            help="With -r: what your tests need (pytest, say), resolved for the board and "
            "installed beside the set for --test only; repeatable.",
        ),
    ] = None,
    test_command: Annotated[
        str | None,
        typer.Option(
            "--test",
            metavar="COMMAND",
            help="With -r: run COMMAND in the set's runtime image under QEMU after the import "
            "check, network off ({project} is --test-sources, read-only); failing fails the build.",
        ),
    ] = None,
    test_sources: Annotated[
        Path | None,
        typer.Option(
            "--test-sources", help="With --test: the directory {project} names (default: .)."
        ),
    ] = None,
    progress: Annotated[
        str,
        typer.Option(
            "--progress",
            help="'tty': a live line per target; 'plain': a line per step and per tenth of a "
            "compile, for logs; 'auto': tty on a terminal.",
        ),
    ] = "auto",
) -> None:
    """Build RECIPE for each target: verified artifacts land in OUT/<target>/<name>-<version>/."""
    from dockerarch import accel as accel_module
    from dockerarch import build as build_module
    from dockerarch import engine, process
    from dockerarch.config import load_registry_config
    from dockerarch.recipes import parse_set
    from dockerarch.render import plan

    accel_module.check_mode(accel)
    live = progress_mode(progress)
    chosen = parse_set(settings or [])
    wanted = None
    set_only = (test_requires or test_command or test_sources or no_deps or index_url
                or extra_index_url or constraint or build_constraint or require_hashes
                or set_name)  # fmt: skip
    from_index = package is not None and not package.startswith((".", "/", "~"))
    if recipe == "wheel" and (requirement or from_index):
        from dockerarch.wheelset import SetRequest, set_requests

        wanted = SetRequest(
            requirement_files=requirement or [], constraint_files=constraint or [],
            build_constraint_files=build_constraint or [],
            packages=[package] if package else [], index_url=index_url,
            extra_index_urls=extra_index_url or [], require_hashes=require_hashes,
            no_deps=no_deps, name=set_name, test_requires=test_requires or [],
            test_command=test_command, test_sources=test_sources,
        )  # fmt: skip
        requests = set_requests(recipe, wanted, arch=arch, target=target, settings=chosen)
        if push and requirement:
            from dockerarch.errors import UsageError

            raise UsageError("--push publishes one package's images; a set from -r has none "
                             "of its own", fix="Publish the set with dockerarch upload wheel -r "
                             "FILE (boards pip install it), or push each package's build.")  # fmt: skip
    elif set_only:
        from dockerarch.errors import UsageError

        raise UsageError("--no-deps, -c, --build-constraint, --index-url, --extra-index-url, --require-hashes, "
                         "--name and the --test options go with a wheel set: build wheel -r "
                         "FILE, or --package NAME from an index",
                         fix="Give -r requirements.txt or a --package spec (not a directory).")  # fmt: skip
    else:
        requests = plan(
            recipe, arch=arch, target=target, version=version, package=package,
            settings=chosen, source=source,
        )  # fmt: skip
    from dockerarch.files import ensure_writable_dir

    ensure_writable_dir(out, "--out")  # before any base is bootstrapped or step is run
    engine.daemon_info()  # fail early and clearly when no engine answers
    if builder is not None and builder != "local":
        from dockerarch.builders import check_forced

        check_forced(builder)
    registry = load_registry_config()
    use_registry_cache = registry.cache if registry_cache is None else registry_cache
    from dockerarch.config import parse_farm_servers

    servers = () if no_farm else (parse_farm_servers(farm) if farm else registry.farm)
    if servers and "MAX_JOBS" not in chosen:
        import os

        from dockerarch.farm import check_farm_jobs

        check_farm_jobs(requests, servers, os.cpu_count() or 2)
    options = build_module.BuildOptions(
        out=out, builder=builder, fallback_qemu=fallback_qemu, cache=not no_cache, smoke=smoke,
        ca_bundle=build_module.host_ca_bundle(), accel=accel, ccache=ccache,
        registry_cache=registry.cache_repository if use_registry_cache else None,
        registry_cache_loopback=registry.loopback, uses=parse_use(use or []), farm=servers,
        jobs_chosen="MAX_JOBS" in chosen,
    )  # fmt: skip
    from dockerarch.progress import Board

    if wanted is not None:
        build_set(requests, wanted, options, live=live)
        if push:
            from dockerarch.cli.push import publish_built
            from dockerarch.publish import find_built

            publish_built(find_built(requests, out), registry, index_tag=None, tags=())
        return
    typer.echo(announcement(requests), err=True)
    with Board((r.target.name for r in requests), live=live) as board:
        results = build_module.run_jobs(requests, options, board)
    typer.echo(summary(results), err=True)
    failed = [r for r in results if r.error is not None]
    for result in results:
        if result.error is None:
            for path in result.artifacts:
                typer.echo(str(path))
            typer.echo(
                f"{result.target}: verified in {result.seconds:.0f} s -> {result.directory}",
                err=True,
            )
    for result in failed:
        error = result.error
        assert error is not None
        typer.echo("", err=True)
        typer.echo(error.render(), err=True)
        tail = getattr(error, "tail", None)
        if tail:
            typer.echo(f"  last {len(tail)} lines of that step:", err=True)
            for line in tail:
                typer.echo(f"    {line}", err=True)
        if result.log is not None:
            typer.echo(f"  full log: {result.log}", err=True)
        if error.__cause__ is not None and process.debug_enabled():
            import traceback

            traceback.print_exception(error.__cause__)
    if failed:
        if push:
            typer.echo("nothing pushed: a target failed", err=True)
        raise typer.Exit(max(r.error.exit_code for r in failed if r.error is not None))
    if push:
        from dockerarch.cli.push import publish_built
        from dockerarch.publish import find_built

        publish_built(find_built(requests, out), registry, index_tag=None, tags=())


def build_set(requests: list[RenderRequest], wanted: SetRequest, options: BuildOptions, *,
              live: bool | None) -> None:  # fmt: skip
    """build wheel -r (or --package from an index): the sets; on stdout the wheels of the
    packages named with --package and each set's directory."""
    from dockerarch import wheelset
    from dockerarch.progress import Board

    with Board((r.target.name for r in requests), live=live) as board:
        made = wheelset.make_sets(requests, wanted, options, board)
    failed = [m.error for t in made for m in t.members.values() if m.error is not None]
    failed += [t.error for t in made if t.error is not None]
    named = wanted.build_names
    for target_set in made:
        built = sum(1 for m in target_set.members.values() if m.built and m.path is not None)
        fetched = sum(1 for m in target_set.members.values() if not m.built)
        if target_set.directory is not None:
            for member in target_set.members.values():
                if member.node.candidate.name in named and member.path is not None:
                    typer.echo(str(member.path))
            typer.echo(str(target_set.directory))
            typer.echo(f"{target_set.target}: {fetched} fetched, {built} built, installed with no "
                       f"index: {target_set.check} -> {target_set.directory}", err=True)  # fmt: skip
            if target_set.needs_apt:
                typer.echo(f"  on a board first: apt install {' '.join(target_set.needs_apt)}",
                           err=True)  # fmt: skip
    for error in failed:
        typer.echo("", err=True)
        typer.echo(error.render(), err=True)
        tail, log = getattr(error, "tail", None), getattr(error, "log", None)
        if tail:
            typer.echo(f"  last {len(tail)} lines of that step:", err=True)
            for line in tail:
                typer.echo(f"    {line}", err=True)
        if log is not None:
            typer.echo(f"  full log: {log}", err=True)
    if failed:
        raise typer.Exit(max(e.exit_code for e in failed))


def summary(results: list[JobResult]) -> str:
    """The table after a build: target, artifacts, seconds, where the compiler runs ran."""
    rows = [("target", "seconds", "compiler runs", "artifacts")]
    for result in results:
        runs = "-"
        if result.hybrid is not None:
            runs = f"{result.hybrid['native']} native, {result.hybrid['emulated']} emulated"
        made = ", ".join(p.name for p in result.artifacts) or ("failed" if result.error else "-")
        rows.append((result.target, f"{result.seconds:.0f}", runs, made))
    return columns(rows)


def parse_use(pairs: list[str]) -> dict[str, Path]:
    """--use NAME=DIR pairs."""
    from dockerarch.errors import UsageError

    found: dict[str, Path] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise UsageError(
                f"--use '{pair}' is not NAME=DIR", fix="Write it like --use torch-wheels=./wheels."
            )
        found[name.strip()] = Path(value.strip()).expanduser()
    return found


def progress_mode(value: str) -> bool | None:
    """--progress as the Board takes it: live (tty), plain, or decided by the terminal (auto)."""
    from dockerarch.errors import UsageError

    modes = {"auto": None, "tty": True, "plain": False}
    if value not in modes:
        raise UsageError(
            f"--progress {value} is not a progress mode", fix="Give auto, tty or plain."
        )
    return modes[value]


def announcement(requests: list[RenderRequest]) -> str:
    """The line a build starts with: what it makes (for the wheel recipe, the package), which
    version, for which targets."""
    names = ", ".join(f"{r.target.name} ({r.target.platform})" for r in requests)
    first = requests[0]
    what = first.package.dist_name if first.package else first.recipe.name
    why = [r.chosen_because for r in requests if r.chosen_because]
    return "\n".join([f"building {what} {first.version} for {names}", *why])

"""``dockerarch build``: the main job."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dockerarch.cli import options
from dockerarch.cli.options import Source
from dockerarch.cli.output import columns
from dockerarch.terminal import printable

if TYPE_CHECKING:
    from dockerarch.build import BuildOptions, JobResult
    from dockerarch.errors import DockerarchError
    from dockerarch.render import RenderRequest
    from dockerarch.sets.wanted import SetRequest


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
            "ccache) start empty, for later builds too. The machine's bases, toolchain "
            "images and runtime bases stay (docs/build.md).",
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
    compiler_cache: Annotated[
        bool,
        typer.Option(
            "--compiler-cache/--no-compiler-cache",
            help="Hybrid builds: use the team's shared compiler cache of registry.yaml's "
            "compiler_cache: (local cache first, then the server; read-only if it says so).",
        ),
    ] = True,
    registry_cache: Annotated[
        bool | None,
        typer.Option(
            "--registry-cache/--no-registry-cache",
            help="Share the build cache through the registry of registry.yaml (default: its "
            "'cache' key). --no-cache still pushes a fresh one.",
        ),
    ] = None,
    requirement: options.Requirement = None,
    constraint: options.Constraint = None,
    build_constraint: options.BuildConstraint = None,
    no_deps: options.NoDeps = False,
    no_binary: options.NoBinary = None,
    index_url: options.IndexUrl = None,
    extra_index_url: options.ExtraIndexUrl = None,
    find_links: options.FindLinks = None,
    require_hashes: options.RequireHashes = False,
    set_name: options.SetName = None,
    test_requires: options.TestRequires = None,
    test_command: options.TestCommand = None,
    test_sources: options.TestSources = None,
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
    from dockerarch import buildrun
    from dockerarch.progress import Board

    live = progress_mode(progress)
    ask = buildrun.BuildAsk(
        recipe=recipe, arch=arch, target=target, version=version, package=package, source=source,
        settings=settings or [], out=out, builder=builder, fallback_qemu=fallback_qemu,
        cache=not no_cache, smoke=smoke, accel=accel, ccache=ccache, use=use or [],
        farm=[] if no_farm else farm or None, registry_cache=registry_cache,
        compiler_cache=compiler_cache and ccache, push=push, requirement_files=requirement or [],
        constraint_files=constraint or [], build_constraint_files=build_constraint or [],
        no_deps=no_deps, no_binary=no_binary or [], index_url=index_url,
        extra_index_urls=extra_index_url or [], find_links=find_links or [],
        require_hashes=require_hashes, set_name=set_name, test_requires=test_requires or [],
        test_command=test_command, test_sources=test_sources,
    )  # fmt: skip
    run = buildrun.prepare(ask, say=lambda line: typer.echo(printable(line), err=True))
    if run.wanted is not None:
        build_set(run.requests, run.wanted, run.options, live=live)
    else:
        typer.echo(buildrun.announcement(run.requests), err=True)
        with Board((r.target.name for r in run.requests), live=live) as board:
            results = buildrun.build_jobs(run, board)
        report(results)
        if any(r.error is not None for r in results):
            if push:
                typer.echo("nothing pushed: a target failed", err=True)
            raise typer.Exit(max(r.error.exit_code for r in results if r.error is not None))
    if push:
        from dockerarch.cli.push import publish_built
        from dockerarch.publish import find_built

        publish_built(find_built(run.requests, out), run.registry, index_tag=None, tags=())


def report(results: list[JobResult]) -> None:
    """The summary, each verified artifact (stdout) and each failure with its step's last lines."""
    from dockerarch import process

    typer.echo(printable(summary(results)), err=True)
    for result in results:
        if result.error is None:
            for path in result.artifacts:
                typer.echo(str(path))
            typer.echo(
                f"{result.target}: verified in {result.seconds:.0f} s -> {result.directory}",
                err=True,
            )
    for result in results:
        error = result.error
        if error is None:
            continue
        _show_failure(error, result.log)
        if error.__cause__ is not None and process.debug_enabled():
            import traceback

            traceback.print_exception(error.__cause__)


def _show_failure(error: DockerarchError, log: Path | None) -> None:
    """A failed build's error, the last lines of its failing step (the build's own output:
    shown literally) and where its whole log is."""
    typer.echo("", err=True)
    typer.echo(error.render(), err=True)
    tail = getattr(error, "tail", None)
    if tail:
        typer.echo(f"  last {len(tail)} lines of that step:", err=True)
        for line in tail:
            typer.echo(f"    {printable(line)}", err=True)
    if log is not None:
        typer.echo(f"  full log: {log}", err=True)


def build_set(requests: list[RenderRequest], wanted: SetRequest, options: BuildOptions, *,
              live: bool | None) -> None:  # fmt: skip
    """build wheel -r (or --package from an index): the sets; on stdout the wheels of the
    packages named with --package and each set's directory."""
    from dockerarch.progress import Board
    from dockerarch.sets.schedule import make_sets

    with Board((r.target.name for r in requests), live=live) as board:
        made = make_sets(requests, wanted, options, board)
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
            typer.echo(printable(f"{target_set.target}: {fetched} fetched, {built} built, installed "
                       f"with no index: {target_set.check} -> {target_set.directory}"), err=True)  # fmt: skip
            if target_set.needs_apt:
                typer.echo(f"  on a board first: apt install {' '.join(target_set.needs_apt)}",
                           err=True)  # fmt: skip
    for error in failed:
        _show_failure(error, getattr(error, "log", None))
    if failed:
        raise typer.Exit(max(e.exit_code for e in failed))


def summary(results: list[JobResult]) -> str:
    """The table after a build: target, artifacts, seconds, where the compiler runs ran."""
    rows = [("target", "seconds", "compiler runs", "compiles", "artifacts")]
    for result in results:
        runs = compiles = "-"
        hybrid = result.hybrid
        if hybrid is not None:
            runs = f"{hybrid['native']} native, {hybrid['emulated']} emulated"
            if "ccache_hits" in hybrid:
                remote = hybrid.get("ccache_remote_hits", 0)
                compiles = (f"{hybrid['ccache_hits'] - remote} local hits, {remote} remote hits, "
                            f"{hybrid['ccache_misses']} compiled, {hybrid.get('ccache_sent', 0)} sent")  # fmt: skip
        made = ", ".join(p.name for p in result.artifacts) or ("failed" if result.error else "-")
        rows.append((result.target, f"{result.seconds:.0f}", runs, compiles, made))
    return columns(rows)


def progress_mode(value: str) -> bool | None:
    """--progress as the Board takes it: live (tty), plain, or decided by the terminal (auto)."""
    from dockerarch.errors import UsageError

    modes = {"auto": None, "tty": True, "plain": False}
    if value not in modes:
        raise UsageError(
            f"--progress {value} is not a progress mode", fix="Give auto, tty or plain."
        )
    return modes[value]

"""``dockerarch build``: the main job."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dockerarch.cli import options
from dockerarch.cli.options import Source
from dockerarch.cli.output import columns

if TYPE_CHECKING:
    from dockerarch.build import BuildOptions, JobResult
    from dockerarch.config import RegistryConfig
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
    from dockerarch import accel as accel_module
    from dockerarch import build as build_module
    from dockerarch.config import load_registry_config
    from dockerarch.progress import Board
    from dockerarch.recipes import parse_set
    from dockerarch.render import plan
    from dockerarch.sets.wanted import SetRequest, set_requests

    accel_module.check_mode(accel)
    live = progress_mode(progress)
    chosen = parse_set(settings or [])
    asked = SetRequest(
        requirement_files=requirement or [], constraint_files=constraint or [],
        build_constraint_files=build_constraint or [], packages=[package] if package else [],
        index_url=index_url, extra_index_urls=extra_index_url or [], require_hashes=require_hashes,
        no_deps=no_deps, no_binary=no_binary or [], find_links=find_links or [], name=set_name,
        test_requires=test_requires or [],
        test_command=test_command, test_sources=test_sources,
    )  # fmt: skip
    wanted = asked if is_set(recipe, asked, push=push) else None
    requests = (set_requests(recipe, wanted, arch=arch, target=target, settings=chosen)
                if wanted is not None else
                plan(recipe, arch=arch, target=target, version=version, package=package,
                     settings=chosen, source=source))  # fmt: skip
    registry = load_registry_config()
    options = build_options(
        requests, chosen, registry, out=out, builder=builder, fallback_qemu=fallback_qemu,
        cache=not no_cache, smoke=smoke, accel=accel, ccache=ccache, use=use or [],
        farm=[] if no_farm else farm or None, registry_cache=registry_cache,
        compiler_cache=compiler_cache and ccache,
    )  # fmt: skip
    if wanted is not None:
        build_set(requests, wanted, options, live=live)
    else:
        typer.echo(announcement(requests), err=True)
        with Board((r.target.name for r in requests), live=live) as board:
            results = build_module.run_jobs(requests, options, board)
        report(results)
        if any(r.error is not None for r in results):
            if push:
                typer.echo("nothing pushed: a target failed", err=True)
            raise typer.Exit(max(r.error.exit_code for r in results if r.error is not None))
    if push:
        from dockerarch.cli.push import publish_built
        from dockerarch.publish import find_built

        publish_built(find_built(requests, out), registry, index_tag=None, tags=())


def is_set(recipe: str, wanted: SetRequest, *, push: bool) -> bool:
    """Whether the command line asks for a wheel set (build wheel -r, or --package from an
    index); options that only a set takes are refused otherwise."""
    from dockerarch.errors import UsageError
    from dockerarch.recipes import directory_named

    package = wanted.packages[0] if wanted.packages else None
    from_index = package is not None and directory_named(package) is None
    set_options = (wanted.test_requires or wanted.test_command or wanted.test_sources
                   or wanted.no_deps or wanted.no_binary or wanted.index_url
                   or wanted.extra_index_urls or wanted.find_links or wanted.constraint_files
                   or wanted.build_constraint_files or wanted.require_hashes or wanted.name)  # fmt: skip
    # a directory with a set's options is a set of one: the project with what it needs
    if recipe == "wheel" and (wanted.requirement_files or from_index
                              or (package is not None and set_options)):  # fmt: skip
        if push and wanted.requirement_files:
            raise UsageError("--push publishes one package's images; a set from -r has none "
                             "of its own", fix="Publish the set with dockerarch upload wheel -r "
                             "FILE (boards pip install it), or push each package's build.")  # fmt: skip
        return True
    if set_options:
        raise UsageError("--no-deps, --no-binary, -c, --build-constraint, --index-url, --extra-index-url, "
                         "--find-links, --require-hashes, --name and the --test options go with a wheel set: "
                         "build wheel -r FILE, or --package NAME",
                         fix="Give -r requirements.txt or a --package spec.")  # fmt: skip
    return False


def build_options(requests: list[RenderRequest], chosen: dict[str, str], registry: RegistryConfig,
                  *, out: Path, builder: str | None, fallback_qemu: bool, cache: bool,
                  smoke: bool, accel: str, ccache: bool, use: list[str], farm: list[str] | None,
                  registry_cache: bool | None, compiler_cache: bool) -> BuildOptions:  # fmt: skip
    """The build's options, everything that can be checked before a base is bootstrapped or a
    step is run checked: the output directory, the engine, a forced builder node, the farm's
    servers (``farm`` None: registry.yaml's; []: none) and the most compiles at once they
    could ask for, the shared compiler cache's answer to this machine's credentials."""
    import os

    from dockerarch import build as build_module
    from dockerarch import engine
    from dockerarch.config import parse_farm_servers
    from dockerarch.farm import JOBS_OPTION, check_farm_jobs
    from dockerarch.files import ensure_writable_dir

    ensure_writable_dir(out, "--out")
    engine.daemon_info()  # fail early and clearly when no engine answers
    if builder is not None and builder != "local":
        from dockerarch.builders import check_forced

        check_forced(builder)
    servers = registry.farm if farm is None else parse_farm_servers(farm)
    if servers and JOBS_OPTION not in chosen:
        check_farm_jobs(requests, servers, os.cpu_count() or 2)
    use_registry_cache = registry.cache if registry_cache is None else registry_cache
    remote = None
    if compiler_cache and registry.compiler_cache is not None:
        from dockerarch import compilercache
        from dockerarch.base import STATE_DIR

        remote = compilercache.check(
            compilercache.credentials(registry.compiler_cache, state_dir=STATE_DIR),
            say=lambda line: typer.echo(line, err=True),
        )  # fmt: skip
    return build_module.BuildOptions(
        out=out, builder=builder, fallback_qemu=fallback_qemu, cache=cache, smoke=smoke,
        ca_bundle=build_module.host_ca_bundle(), accel=accel, ccache=ccache,
        registry_cache=registry.cache_repository if use_registry_cache else None,
        registry_cache_loopback=registry.loopback, uses=parse_use(use), farm=servers,
        jobs_chosen=JOBS_OPTION in chosen, compiler_cache=remote,
    )  # fmt: skip


def report(results: list[JobResult]) -> None:
    """The summary, each verified artifact (stdout) and each failure with its step's last lines."""
    from dockerarch import process

    typer.echo(summary(results), err=True)
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

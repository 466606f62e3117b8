"""The build verb as a library: what a command line asks for (BuildAsk) checked and planned before
anything runs (a recipe's requests for each target, or a wheel set's; the build's options: the
output directory, the engine, a forced node, the farm, the shared compiler cache), and the
recipe builds run. The CLI parses options into a BuildAsk, calls prepare, and prints.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dockerarch.build import BuildOptions, JobResult, Progress
from dockerarch.config import RegistryConfig
from dockerarch.render import RenderRequest
from dockerarch.sets.wanted import SetRequest

Say = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class BuildAsk:
    """Everything `dockerarch build` was asked, as the command line gave it."""

    recipe: str
    arch: str | None = None
    target: str | None = None
    version: str | None = None
    package: str | None = None
    source: str | None = None
    settings: list[str] = field(default_factory=list)  # --set KEY=VALUE
    out: Path = Path("dist")
    builder: str | None = None
    fallback_qemu: bool = False
    cache: bool = True
    smoke: bool = True
    accel: str = "hybrid"
    ccache: bool = True
    use: list[str] = field(default_factory=list)  # --use NAME=DIR
    farm: list[str] | None = None  # None: registry.yaml's; []: none
    registry_cache: bool | None = None
    compiler_cache: bool = True
    push: bool = False
    # a wheel set's (SetRequest)
    requirement_files: list[Path] = field(default_factory=list)
    constraint_files: list[Path] = field(default_factory=list)
    build_constraint_files: list[Path] = field(default_factory=list)
    no_deps: bool = False
    no_binary: list[str] = field(default_factory=list)
    index_url: str | None = None
    extra_index_urls: list[str] = field(default_factory=list)
    find_links: list[str] = field(default_factory=list)
    require_hashes: bool = False
    set_name: str | None = None
    test_requires: list[str] = field(default_factory=list)
    test_command: str | None = None
    test_sources: Path | None = None

    def set_request(self) -> SetRequest:
        return SetRequest(
            requirement_files=self.requirement_files, constraint_files=self.constraint_files,
            build_constraint_files=self.build_constraint_files,
            packages=[self.package] if self.package else [], index_url=self.index_url,
            extra_index_urls=self.extra_index_urls, require_hashes=self.require_hashes,
            no_deps=self.no_deps, no_binary=self.no_binary, find_links=self.find_links,
            name=self.set_name, test_requires=self.test_requires,
            test_command=self.test_command, test_sources=self.test_sources,
        )  # fmt: skip


@dataclass(frozen=True)
class PreparedBuild:
    """A build checked and planned: its requests, the set it is (None: recipe builds), its
    options and the registry configuration it was planned with."""

    requests: list[RenderRequest]
    wanted: SetRequest | None
    options: BuildOptions
    registry: RegistryConfig


def prepare(ask: BuildAsk, *, say: Say) -> PreparedBuild:
    """``ask`` checked (the acceleration mode, a set's options, the output directory, the
    engine, a forced node, the farm, the shared compiler cache) and planned, before any base is
    bootstrapped or any step run."""
    from dockerarch import accel as accel_module
    from dockerarch.config import load_registry_config
    from dockerarch.recipes import parse_set
    from dockerarch.render import plan
    from dockerarch.sets.wanted import set_requests

    accel_module.check_mode(ask.accel)
    chosen = parse_set(ask.settings)
    asked = ask.set_request()
    wanted = asked if is_set(ask.recipe, asked, push=ask.push) else None
    requests = (set_requests(ask.recipe, wanted, arch=ask.arch, target=ask.target, settings=chosen)
                if wanted is not None else
                plan(ask.recipe, arch=ask.arch, target=ask.target, version=ask.version,
                     package=ask.package, settings=chosen, source=ask.source, to_build=True))  # fmt: skip
    registry = load_registry_config()
    options = build_options(
        requests, chosen, registry, out=ask.out, builder=ask.builder,
        fallback_qemu=ask.fallback_qemu, cache=ask.cache, smoke=ask.smoke, accel=ask.accel,
        ccache=ask.ccache, use=ask.use, farm=ask.farm, registry_cache=ask.registry_cache,
        compiler_cache=ask.compiler_cache, fetches_in_engine=wanted is None, say=say,
    )  # fmt: skip
    return PreparedBuild(requests, wanted, options, registry)


def build_jobs(run: PreparedBuild, progress: Progress) -> list[JobResult]:
    """A recipe's builds, one job per target (build.run_jobs)."""
    from dockerarch import build as build_module

    return build_module.run_jobs(run.requests, run.options, progress)


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
                  registry_cache: bool | None, compiler_cache: bool, fetches_in_engine: bool = True,
                  say: Say) -> BuildOptions:  # fmt: skip
    """The build's options, everything that can be checked before a base is bootstrapped or a
    step is run checked: the output directory, the engine, a forced builder node, the farm's
    servers (``farm`` None: registry.yaml's; []: none) and the most compiles at once they
    could ask for, the shared compiler cache's answer to this machine's credentials, and for a
    recipe's build (``fetches_in_engine``: not a wheel set, which fetches on this machine) the
    indexes pip's configuration names here."""
    import os

    from dockerarch import build as build_module
    from dockerarch import engine, machineimages, pipconfig
    from dockerarch.config import parse_farm_servers
    from dockerarch.farm import JOBS_OPTION, check_farm_jobs
    from dockerarch.files import ensure_writable_dir

    indexes = pipconfig.for_builds(pipconfig.read()) if fetches_in_engine else None
    if indexes is not None and indexes.says():
        say(indexes.says())
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
            say=say,
        )  # fmt: skip
    return build_module.BuildOptions(
        out=out, builder=builder, fallback_qemu=fallback_qemu, cache=cache, smoke=smoke,
        ca_bundle=build_module.host_ca_bundle(), accel=accel, ccache=ccache,
        registry_cache=registry.cache_repository if use_registry_cache else None,
        registry_cache_loopback=registry.loopback, uses=parse_use(use), farm=servers,
        jobs_chosen=JOBS_OPTION in chosen, compiler_cache=remote, indexes=indexes,
        machine_images=machineimages.sharing(registry),
    )  # fmt: skip


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


def announcement(requests: list[RenderRequest]) -> str:
    """The line a build starts with: what it makes (for the wheel recipe, the package), which
    version, for which targets."""
    names = ", ".join(f"{r.target.name} ({r.target.platform})" for r in requests)
    first = requests[0]
    what = first.package.dist_name if first.package else first.recipe.name
    why = [r.chosen_because for r in requests if r.chosen_because]
    return "\n".join([f"building {what} {first.version} for {names}", *why])

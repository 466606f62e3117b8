"""Dockerfile generation: one sandboxed Jinja2 environment with StrictUndefined.

Same input, same bytes: nothing time- or host-dependent enters a template, and every mapping is
passed sorted. Every value a template prints goes through ``_finalize``, a last guard that no
shell metacharacter reaches a RUN line whatever a recipe's own patterns allow.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dockerarch import __version__, accel
from dockerarch.accel import Toolchain, build_stage_apt
from dockerarch.errors import ConfigError, DockerarchError, UsageError
from dockerarch.recipes import SAFE_VALUE, PackageSpec, Recipe
from dockerarch.targets import BoardTarget

if TYPE_CHECKING:
    from jinja2.sandbox import SandboxedEnvironment

    from dockerarch.artifacts import ArtifactReport
    from dockerarch.sources import LocalSource


class TemplateError(ConfigError):
    """A template is broken: names its file and line."""


@dataclass(frozen=True, kw_only=True)
class RenderRequest:
    recipe: Recipe
    target: BoardTarget
    version: str
    options: Mapping[str, str]
    package: PackageSpec | None = None
    toolchain: Toolchain | None = None  # a hybrid build's native cross toolchain
    source: LocalSource | None = None  # --source: the upstream tree from this machine
    chosen_because: str | None = None  # the recipe picked this target for --arch: why
    # A wheel set's build: the wheels its runtime image installs with it (the named context
    # `wheelset`), and the ones its build environment takes with build-constraints.txt
    # (`wheelset-build`; the same directory when not given). Apart, so that the build step's
    # cache key holds only what it reads: a wheel its run-time closure gains (a member built again
    # once its wheel said what it needs) compiles nothing again.
    wheelset: Path | None = None
    wheelset_build: Path | None = None
    # A wheel set's member whose runtime image installs the whole set (every other board package
    # is in its run-time closure): those wheels, whose libraries and modules its checks cover too
    installed_with: tuple[ArtifactReport, ...] = ()
    # A wheel set's member: the target's packages that the set's wheels its runtime image installs
    # with it need (their own builds found them: scipy's libopenblas0-pthread for lightgbm)
    runtime_needs: tuple[str, ...] = ()
    # A wheel set's member whose run-time requirements only its wheel tells: the wheel alone (no
    # runtime image, no smoke test), built again with them once the set has them
    wheel_only: bool = False
    # A wheel set's member fetched from an index (or a --find-links directory): someone else's
    # code, whatever its tree's path on this machine (own_code)
    fetched: bool = False
    # An index the build fetches from (pipconfig.for_builds) is on this machine's loopback: the
    # fetching steps run on the host's network (never a wheel set's: it fetches on the host)
    index_network: bool = False
    # A native (amd64) build with a compile farm (use_farm decides): its build stage's gcc and
    # g++ send compiles through distcc (data/toolchain/native-farm); farm_network is the compile
    # steps' network ("host" for a server on loopback)
    native_farm: bool = False
    farm_network: str = ""

    @property
    def fetch_network(self) -> bool:
        """Whether the fetching steps run on the host's network (an index on loopback); a wheel
        set's never do: it fetches on the host."""
        return self.index_network and self.wheelset is None

    @property
    def own_code(self) -> bool:
        """The user's own code: a tree on this machine they gave (--source DIR, --package ./DIR,
        a set's ./DIR or -e DIR line), not one fetched from an index or a recipe's pinned source.
        Only such a build gets a shared compiler cache's writer credential (compilercache)."""
        local = self.package is not None and self.package.local is not None
        return not self.fetched and (self.source is not None or local)

    @property
    def built_options(self) -> dict[str, str]:
        """The options as built: a tree given with --source is SOURCE=--source (its patch
        conditions, its manifest), not the option's default, which was not used."""
        return {**self.options, **({"SOURCE": "--source"} if self.source else {})}

    @property
    def result_name(self) -> str:
        """What the build makes, as its result directory is named: ``<name>-<version>``."""
        name = self.package.dist_name if self.package else self.recipe.name
        return f"{name}-{self.version}"


def _finalize(value: Any) -> Any:
    """Check every value a template prints, and mark it as checked.

    Macro output (``{{ m.apt_install(...) }}``) comes back as Markup: it is template text plus
    values that already passed through here. Everything else must be a plain value free of
    shell characters; returning it as Markup keeps autoescape from HTML-escaping ``<`` in a
    version specifier.
    """
    from jinja2 import Undefined
    from markupsafe import Markup

    if isinstance(value, Markup):
        return value
    if isinstance(value, Undefined):
        str(value)  # StrictUndefined raises UndefinedError, naming the missing variable
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        text = str(value)
        if not SAFE_VALUE.match(text):
            raise TemplateError(
                f"A template printed {text!r}, which holds shell characters (quotes, $, ;, |, "
                "&, backticks, backslashes or newlines)",
                fix="Templates may print only checked values; write literal shell in the "
                "template text itself.",
            )
        return Markup(text)
    if value is None:
        raise TemplateError("A template printed a value that is None")
    raise TemplateError(
        f"A template printed a {type(value).__name__}, not a plain value",
        fix="Print its fields, or loop over a list.",
    )


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version))


@functools.cache
def template_environment(search_path: tuple[Path, ...]) -> SandboxedEnvironment:
    from jinja2 import FileSystemLoader, StrictUndefined
    from jinja2.sandbox import SandboxedEnvironment

    env = SandboxedEnvironment(
        loader=FileSystemLoader([str(p) for p in search_path]),
        undefined=StrictUndefined,
        finalize=_finalize,
        autoescape=True,  # with _finalize: only checked values and macro output are printed
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["version_tuple"] = _version_tuple
    env.filters["hybrid_apt"] = build_stage_apt
    return env


def _template_location(exc: BaseException, search_path: tuple[Path, ...]) -> str:
    """file:line of the innermost template frame in ``exc``'s traceback."""
    lineno = getattr(exc, "lineno", None)
    filename = getattr(exc, "filename", None)
    if filename and lineno:
        return f"{filename}:{lineno}"
    roots = tuple(str(p) for p in search_path)
    for frame, line in reversed(list(traceback.walk_tb(exc.__traceback__))):
        name = frame.f_code.co_filename
        if name.startswith(roots):
            return f"{name}:{line}"
    return "?"


@dataclass(frozen=True)
class Rendered:
    """A rendered Dockerfile and the options it builds with: those given, with what the
    template decided itself (its top-level ``effective_options``: an option a target cannot
    have, or one another option implies), so that manifest.json says what was built."""

    text: str
    options: dict[str, str]


def render(request: RenderRequest, search_path: list[Path]) -> str:
    return render_dockerfile(request, search_path).text


def render_dockerfile(request: RenderRequest, search_path: list[Path]) -> Rendered:
    from jinja2 import TemplateError as JinjaError
    from jinja2 import TemplateNotFound

    paths = (
        request.recipe.template.parent,
        *[p for p in search_path if p != request.recipe.template.parent],
    )
    env = template_environment(tuple(paths))
    target = request.target
    recipe = request.recipe
    variables = {
        "dockerarch_version": __version__,
        "target": target.template_vars(),
        "recipe": {
            "name": recipe.name,
            "version": request.version,
            "artifacts": list(recipe.artifacts),
            "apt": list(recipe.apt),
            "runtime_apt": list(recipe.runtime_apt),
            "patches": recipe.patches_for(request.version, request.built_options),
        },
        "options": dict(sorted(request.options.items())),
        "package": (
            {
                "spec": request.package.spec,
                "name": request.package.name,
                "version": request.package.version or "any",
                "dist_name": request.package.dist_name,
                "local": request.package.local is not None,
            }
            if request.package
            else None
        ),
        "toolchain": request.toolchain.template_vars() if request.toolchain else None,
        "local_source": request.source is not None,
        "wheelset": request.wheelset is not None,
        "index_network": request.fetch_network,
        "native_farm": _native_farm_vars(request) if request.native_farm else None,
    }
    try:
        template = env.get_template(recipe.template.name)
        try:
            module = template.make_module(variables)
        except Exception:  # as Template.render does: a traceback with the template's lines
            env.handle_exception()
        text = str(module)
    except TemplateNotFound as exc:
        where = _template_location(exc, tuple(paths))
        raise TemplateError(
            f"Template {where} includes '{exc.name}', which is in none of "
            f"{', '.join(str(p) for p in paths)}"
        ) from exc
    except JinjaError as exc:
        where = _template_location(exc, tuple(paths))
        raise TemplateError(
            f"Template error at {where}: {exc.message or exc}",
            fix="Fix the template; `dockerarch generate --debug` shows the full traceback.",
        ) from exc
    except DockerarchError as exc:
        where = _template_location(exc, tuple(paths))
        raise TemplateError(f"{where}: {exc.problem}", fix=exc.fix) from exc
    if not text.endswith("\n"):
        text += "\n"
    decided = getattr(module, "effective_options", None) or {}
    where = f"Template {recipe.template}"
    if not isinstance(decided, dict) or not all(
        name in recipe.options and isinstance(value, str) for name, value in decided.items()
    ):
        raise TemplateError(
            f"{where} sets effective_options to {decided!r}: it must map the recipe's options "
            f"({', '.join(sorted(recipe.options))}) to strings",
            fix='Name only options the recipe declares, with string values ({"USE_X": "0"}).',
        )
    return Rendered(text=text, options={**request.built_options, **decided})


def _native_farm_vars(request: RenderRequest) -> dict[str, str]:
    return {"context": accel.CONTEXT_DIR, "log": accel.FARM_LOG, "export": accel.FARM_EXPORT,
            "log_stage": accel.LOG_STAGE, "network": request.farm_network}  # fmt: skip


def for_generate(request: RenderRequest, mode: str) -> RenderRequest:
    """The request as a local build under QEMU would render it. Whether Debian has the cross
    packages is not asked here (generate starts no process); build asks, and falls back."""
    from dockerarch.targets import load_targets

    decision = accel.decide(
        request.target, request.recipe, requested=mode, route_accel="qemu",
        toolchain_base=accel.toolchain_base(request.target, load_targets()),
        cross_available=lambda _p, _s: True,
    )  # fmt: skip
    return dataclasses.replace(request, toolchain=decision.toolchain)


def _chosen_because(recipe: Recipe, board: BoardTarget, arch: str | None) -> str | None:
    rule = recipe.arch_targets.get(board.arch.name)
    if arch is None or rule is None or rule.target != board.name:
        return None
    return f"{recipe.name} for --arch {board.arch.name} builds for {board.name}: {rule.why}"


def plan(
    recipe_name: str,
    *,
    arch: str | None,
    target: str | None,
    version: str | None,
    package: str | None,
    settings: Mapping[str, str],
    source: str | None = None,
    to_build: bool = False,
) -> list[RenderRequest]:
    """Check every input of ``generate`` / ``build`` and turn it into one request per target.

    Nothing is rendered before every value passed its recipe's checks. ``to_build``: the request
    is rendered or built (a recipe that builds only from a given tree needs ``source``); push,
    upload and export only name a result.
    """
    from dockerarch.recipes import (
        find_recipe,
        load_recipes,
        parse_package_spec,
        with_declared_compilers,
    )
    from dockerarch.targets import load_targets, select_targets

    recipe = find_recipe(load_recipes(), recipe_name)
    for_arch = {name: rule.target for name, rule in recipe.arch_targets.items()}
    chosen = select_targets(load_targets(), arch=arch, target=target, for_arch=for_arch)
    spec = None
    if recipe.needs_package:
        if package is None:
            raise UsageError(
                f"Recipe '{recipe.name}' needs --package",
                fix="Name the PyPI package to build, like --package 'zstandard==0.23.0'.",
            )
        if version is not None:
            raise UsageError(
                f"Recipe '{recipe.name}' takes its version from --package, not --version",
                fix="Pin it in the spec: --package 'NAME==VERSION'.",
            )
        spec = parse_package_spec(package)
        resolved_version = spec.version or "any"
        if spec.local is not None:
            recipe = with_declared_compilers(recipe, spec.local)
    else:
        if package is not None:
            raise UsageError(
                f"Recipe '{recipe.name}' does not take --package",
                fix="Only the 'wheel' recipe builds a named PyPI package; use --version here.",
            )
        resolved_version = recipe.check_version(version)
    options = {board.name: recipe.resolve_options(resolved_version, settings, board)
               for board in chosen}  # fmt: skip
    for board in chosen:
        recipe.check_target(board)
        recipe.check_combination(board, resolved_version, options[board.name])
    if to_build and recipe.needs_source and source is None:
        raise UsageError(
            f"Recipe '{recipe.name}' builds only from a tree you give: {recipe.needs_source}",
            fix=f"Give it with --source DIR (or an archive); it must hold "
            f"{' or '.join(recipe.source_markers)}.",
        )
    local = None
    if source is not None:
        from dockerarch.sources import check_source

        local = check_source(source, recipe)
    return [
        RenderRequest(
            recipe=recipe,
            target=board,
            version=resolved_version,
            options=options[board.name],
            package=spec,
            source=local,
            chosen_because=_chosen_because(recipe, board, arch),
        )
        for board in chosen
    ]

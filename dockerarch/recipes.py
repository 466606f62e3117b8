"""Recipes: what to build, in which versions, with which options.

A recipe is ``dockerfiles/<name>.Dockerfile.j2`` (which may extend shared partials under
``dockerfiles/_partials/``), its build context ``contexts/<name>/`` and the metadata in
``contexts/<name>/recipe.yaml``. Every value a user gives (version, package spec, option) is
checked against the recipe's patterns here, before anything is rendered.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dockerarch import paths
from dockerarch.config import did_you_mean, load_yaml, reject_unknown, require_mapping
from dockerarch.errors import ConfigError, UsageError
from dockerarch.targets import BUILD_ARCHES, BoardTarget

ARTIFACT_KINDS = ("wheel", "deb", "tarball", "image")
RECIPE_FILE = "recipe.yaml"
_RECIPE_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_APT_NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
_OPTION_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# What any value may hold before it is rendered: no quotes, no $, no ; | & ` \ and no newline.
# Recipes narrow this further with their own patterns.
SAFE_VALUE = re.compile(r"^[A-Za-z0-9 _.,:/=+@%~<>!\[\]*-]*$")
# PEP 508 requirement without markers or URLs: name, extras, version specifiers.
_PACKAGE_SPEC = re.compile(
    r"^(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)"
    r"(?:\[(?P<extras>[A-Za-z0-9._-]+(?:,[A-Za-z0-9._-]+)*)\])?"
    r"(?P<specs>(?:(?:===|==|!=|~=|<=|>=|<|>)[A-Za-z0-9.*+!_-]+)"
    r"(?:,(?:===|==|!=|~=|<=|>=|<|>)[A-Za-z0-9.*+!_-]+)*)?$"
)


@dataclass(frozen=True, kw_only=True)
class RecipeOption:
    name: str
    help: str
    default: str
    choices: tuple[str, ...] = ()
    pattern: str | None = None

    def check(self, value: str, recipe: str) -> str:
        if self.choices and value not in self.choices:
            raise UsageError(
                f"Option {self.name}={value!r} is not valid for recipe '{recipe}'",
                fix=f"Choose one of: {', '.join(self.choices)}.",
            )
        if self.pattern and not re.fullmatch(self.pattern, value):
            raise UsageError(
                f"Option {self.name}={value!r} is not valid for recipe '{recipe}': it must "
                f"match {self.pattern}",
                fix=f"{self.name} is: {self.help}." if self.help else "Fix the value.",
            )
        if not SAFE_VALUE.match(value):
            raise UsageError(
                f"Option {self.name} holds characters that could reach a shell (quotes, $, ;, "
                "|, &, backticks, backslashes or newlines)",
                fix="Use plain values.",
            )
        return value


@dataclass(frozen=True, kw_only=True)
class PackageSpec:
    spec: str
    name: str
    version: str | None  # the pinned version of name==version
    local: Path | None = None  # a source directory on this machine instead of a PyPI name

    @property
    def dist_name(self) -> str:
        """The name as wheel files spell it (PEP 427: runs of -_. become _)."""
        return re.sub(r"[-_.]+", "_", self.name).lower()


# What a source tree's own build system declares it compiles besides C and C++, in the files a
# PEP 517 backend configures (meson-python: meson.build; scikit-build-core and CMake-driven
# setup.py: CMakeLists.txt), and the Debian package of that compiler. Only the top-level file,
# comments left out: numpy's sdist carries Fortran in its f2py documentation and meson's own test
# cases, scipy's meson.build says add_languages('fortran'). Optional languages (meson's
# `required: false`, CMake's OPTIONAL) are not needs.
_MESON_CALL = re.compile(r"\b(project|add_languages)\s*\(([^)]*)\)", re.S)
_CMAKE_CALL = re.compile(r"\b(project|enable_language)\s*\(([^)]*)\)", re.S | re.I)
_LANGUAGE_PACKAGES = {"fortran": "gfortran"}


def declared_compilers(tree: Path) -> dict[str, str]:
    """{Debian package: where the tree declares it} for the compilers beyond C and C++ that
    ``tree``'s build system asks for (gfortran for meson's add_languages('fortran'))."""
    found: dict[str, str] = {}
    for name, call in (("meson.build", _MESON_CALL), ("CMakeLists.txt", _CMAKE_CALL)):
        try:
            text = (tree / name).read_text(errors="replace")
        except OSError:
            continue
        code = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
        for match in call.finditer(code):
            args = match.group(2)
            if re.search(r"\brequired\s*:\s*false\b|\bOPTIONAL\b", args):
                continue
            for language, package in _LANGUAGE_PACKAGES.items():
                if re.search(rf"\b{language}\b", args, re.I):
                    found.setdefault(package, f"{name}: {match.group(1)}({' '.join(args.split())})")
    return found


def with_declared_compilers(recipe: Recipe, tree: Path) -> Recipe:
    """``recipe`` with the compilers ``tree`` declares (declared_compilers) among its apt
    packages: installed where the build has no compiler for them, as a native amd64 build or one
    under plain QEMU (a hybrid build grafts the cross gfortran in their place: accel)."""
    more = tuple(p for p in declared_compilers(tree) if p not in recipe.apt)
    return dataclasses.replace(recipe, apt=recipe.apt + more) if more else recipe


def local_package(path: Path) -> PackageSpec:
    """A source tree: its name and version from pyproject.toml's [project] (static values), or
    from PKG-INFO, which every unpacked sdist has (setup.py-only projects among them)."""
    import tomllib
    from email.parser import HeaderParser

    pyproject, pkg_info = path / "pyproject.toml", path / "PKG-INFO"
    if not pyproject.is_file() and not (path / "setup.py").is_file():
        raise UsageError(
            f"{path} is a directory without a pyproject.toml or setup.py",
            fix="Point --package at a Python project's source tree, or give a PyPI spec.",
        )
    project: dict[str, Any] = {}
    if pyproject.is_file():
        try:
            project = tomllib.loads(pyproject.read_text()).get("project", {})
        except tomllib.TOMLDecodeError as exc:
            raise UsageError(f"{pyproject} is not valid TOML: {exc}", fix="Fix the file.") from exc
    name, version = project.get("name"), project.get("version")
    if not (isinstance(name, str) and isinstance(version, str)) and pkg_info.is_file():
        headers = HeaderParser().parsestr(pkg_info.read_text(errors="replace"))
        name, version = headers.get("Name"), headers.get("Version")
    if not isinstance(name, str) or not isinstance(version, str) or not _PACKAGE_SPEC.match(name):
        raise UsageError(
            f"{path} names no static version: neither pyproject.toml's [project] nor a PKG-INFO "
            "gives name and version",
            fix="dockerarch names the result NAME-VERSION; write both in [project] of "
            "pyproject.toml (or build from an unpacked sdist, which has PKG-INFO).",
        )
    from packaging.version import InvalidVersion, Version

    try:  # the result's directory is NAME-VERSION: only a PEP 440 version, normalised, names it
        version = str(Version(version))
    except InvalidVersion:
        raise UsageError(
            f"{path}'s version {version[:80]!r} is not a PEP 440 version",
            fix="Write a version such as 1.0 or 2.3.post1 in [project] of pyproject.toml (or the "
            "PKG-INFO of the sdist it came from).",
        ) from None
    return PackageSpec(spec=name, name=name, version=version, local=path.resolve())


def directory_named(text: str) -> Path | None:
    """The directory ``text`` names as pip takes one (./DIR, ../DIR, /DIR, ~/DIR, file:///DIR),
    unchecked; None when it names a package."""
    if text.startswith("file://"):
        from urllib.parse import unquote, urlparse

        parsed = urlparse(text)
        if parsed.netloc not in ("", "localhost"):
            raise UsageError(f"{text} names a file on another machine",
                             fix="Give a directory on this machine: ./DIR or /DIR.")  # fmt: skip
        return Path(unquote(parsed.path))
    if text.startswith(("./", "../", "/", "~")) or text in (".", ".."):
        return Path(text).expanduser()
    return None


def parse_package_spec(text: str) -> PackageSpec:
    path = directory_named(text)
    if path is not None:
        if not path.is_dir():
            raise UsageError(f"--package {text}: no such directory", fix="Check the path.")
        return local_package(path)
    spec = text.strip().replace(" ", "")
    found = _PACKAGE_SPEC.match(spec)
    if not found or not spec:
        raise UsageError(
            f"'{text}' is not a package spec dockerarch accepts",
            fix="Give a PyPI name with an optional version, like 'zstandard==0.23.0' or "
            "'numpy>=1.26,<2' (no URLs, markers, quotes or shell characters), or a source "
            "directory starting with ./ or /.",
        )
    specs = found.group("specs") or ""
    pinned = re.fullmatch(r"===?([A-Za-z0-9.+!_-]+)", specs)
    return PackageSpec(
        spec=spec, name=found.group("name"), version=pinned.group(1) if pinned else None
    )


@dataclass(frozen=True, kw_only=True)
class ArchTarget:
    """``arch_targets`` in recipe.yaml: the target ``--arch A`` means for this recipe, and why
    (said when a build starts)."""

    target: str
    why: str


@dataclass(frozen=True, kw_only=True)
class Refusal:
    """``refuse`` in recipe.yaml: a combination known not to build or not to run, refused before
    any work, with the reason and the way out. Every condition given must hold."""

    why: str
    fix: str
    arches: tuple[str, ...] = ()
    targets: tuple[str, ...] = ()  # fnmatch patterns of target names
    versions: str | None = None  # a PEP 440 specifier set: "<2.6"
    glibc: str | None = None  # the target's glibc, as a specifier set: "<2.41"
    options: Mapping[str, str] = field(default_factory=dict)

    def applies(self, target: BoardTarget, version: str, options: Mapping[str, str]) -> bool:
        from packaging.specifiers import SpecifierSet
        from packaging.version import InvalidVersion, Version

        def within(spec: str | None, value: str) -> bool:
            if spec is None:
                return True
            try:
                return Version(value) in SpecifierSet(spec, prereleases=True)
            except InvalidVersion:  # "master", a commit: no rule about numbers holds
                return False

        return (
            (not self.arches or target.arch.name in self.arches)
            and (not self.targets or any(fnmatch.fnmatchcase(target.name, t) for t in self.targets))
            and all(options.get(k) == v for k, v in self.options.items())
            and within(self.versions, version)
            and within(self.glibc, target.glibc)
        )


@dataclass(frozen=True, kw_only=True)
class Recipe:
    name: str
    description: str
    template: Path
    context: Path
    versions: tuple[str, ...]
    default_version: str | None
    version_pattern: str
    needs_package: bool
    options: Mapping[str, RecipeOption]
    per_version: Mapping[str, Mapping[str, str]]
    artifacts: tuple[str, ...]
    apt: tuple[str, ...]
    runtime_apt: tuple[str, ...]
    smoke: tuple[str, ...]
    arches: tuple[str, ...]
    targets: tuple[str, ...] = ()  # empty: every target of the arches
    source: Path = field(default=Path())
    no_hybrid: str | None = None  # why this recipe must compile with the emulated ARM compiler
    # Recipes that clone a git repository take --source: files of which one must be at its root.
    source_markers: tuple[str, ...] = ()
    # Why this recipe builds only from a tree given with --source (it has nothing to clone).
    needs_source: str | None = None
    # Code generators a hybrid build runs in the native Python (same version, the stage's own
    # pure-Python files): module names ("torchgen.gen", run as python -m) and scripts
    # ("tools/setup_helpers/generate_code.py", matched at the end of the path).
    native_python: tuple[str, ...] = ()
    # Named build contexts from other recipes' results: name -> result directory pattern under
    # OUT/<target>/, with {OPTION} replaced ("torch-wheels": "torch-{TORCH_VERSION}").
    uses: Mapping[str, str] = field(default_factory=dict)
    # --arch A builds for this target rather than the arch's default (torch for armv7: trixie).
    arch_targets: Mapping[str, ArchTarget] = field(default_factory=dict)
    # Option defaults by target name (fnmatch patterns), after per_version's, before --set.
    per_target: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    refusals: tuple[Refusal, ...] = ()
    # Source patches: files under contexts/<name>/patches/, applied in order, keyed by a version
    # glob and optional option conditions ("2.6.* SOURCE=debian").
    patches: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def supports(self, target: BoardTarget) -> bool:
        if target.arch.name not in self.arches:
            return False
        return not self.targets or target.name in self.targets

    def check_target(self, target: BoardTarget) -> None:
        if not self.supports(target):
            scope = (
                ", ".join(self.targets) if self.targets else "targets of " + "/".join(self.arches)
            )
            raise UsageError(
                f"Recipe '{self.name}' does not build for target '{target.name}' "
                f"({target.arch.name})",
                fix=f"It builds for: {scope}.",
            )

    def check_version(self, version: str | None) -> str:
        if version is None:
            if self.default_version is None:
                raise UsageError(
                    f"Recipe '{self.name}' needs --version",
                    fix=f"Known versions: {', '.join(self.versions)}." if self.versions else None,
                )
            return self.default_version
        if not re.fullmatch(self.version_pattern, version) or not SAFE_VALUE.match(version):
            known = f" Known versions: {', '.join(self.versions)}." if self.versions else ""
            raise UsageError(
                f"'{version}' is not a valid version of recipe '{self.name}' (it must match "
                f"{self.version_pattern})",
                fix=f"Give a version like {self.default_version or self.versions[0]}.{known}",
            )
        return version

    def resolve_options(
        self, version: str, overrides: Mapping[str, str], target: BoardTarget | None = None
    ) -> dict[str, str]:
        """Defaults, then the defaults for this version, then for this target, then --set, each
        checked."""
        values = {name: opt.default for name, opt in self.options.items()}
        for key in sorted(self.per_version):
            if fnmatch.fnmatchcase(version, key):
                values.update(self.per_version[key])
        for key in sorted(self.per_target):
            if target is not None and fnmatch.fnmatchcase(target.name, key):
                values.update(self.per_target[key])
        for key, value in overrides.items():
            if key not in self.options:
                raise UsageError(
                    f"Recipe '{self.name}' has no option '{key}'.{did_you_mean(key, self.options)}",
                    fix=f"Its options: {', '.join(self.options) or 'none'}.",
                )
            values[key] = value
        return {key: self.options[key].check(values[key], self.name) for key in sorted(values)}

    def patches_for(self, version: str, options: Mapping[str, str]) -> list[str]:
        """The patches for ``version`` and ``options``, in the order recipe.yaml lists them. A
        tree given with --source has SOURCE=--source here."""
        chosen: list[str] = []
        for key, names in self.patches.items():
            glob, *conditions = key.split()
            if fnmatch.fnmatchcase(version, glob) and all(
                options.get(k) == v for k, _, v in (c.partition("=") for c in conditions)
            ):
                chosen.extend(names)
        return chosen

    def check_combination(
        self, target: BoardTarget, version: str, options: Mapping[str, str]
    ) -> None:
        """Refuse what this recipe's ``refuse`` rules know will not build or run."""
        for rule in self.refusals:
            if rule.applies(target, version, options):
                raise UsageError(
                    f"{self.name} {version} for {target.name} ({target.distro} {target.suite}, "
                    f"glibc {target.glibc}): {rule.why}",
                    fix=rule.fix,
                )


def parse_set(pairs: Sequence[str]) -> dict[str, str]:
    """``--set KEY=VALUE`` arguments into a mapping."""
    result: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(
                f"--set '{pair}' is not KEY=VALUE", fix="Write it like --set MAX_JOBS=2."
            )
        result[key.strip()] = value.strip()
    return result


_TOP_KEYS = (
    "description", "template", "versions", "package", "options", "per_version", "artifacts",
    "apt", "runtime_apt", "smoke", "arches", "targets", "no_hybrid", "source_markers", "uses",
    "native_python", "arch_targets", "per_target", "refuse", "patches", "needs_source",
)  # fmt: skip
_PATCH_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*\.patch$")
_CONTEXT_NAME = re.compile(r"^[a-z][a-z0-9-]*$")


def _strings(value: Any, where: str, source: Path) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str | int | float) for v in value):
        raise ConfigError(f"'{where}' in {source} must be a list of strings")
    return tuple(str(v) for v in value)


def _reason(value: Any, source: Path, key: str = "no_hybrid") -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        what = {"no_hybrid": "the recipe needs the emulated ARM compiler",
                "needs_source": "the recipe builds only from a tree given with --source"}[key]  # fmt: skip
        raise ConfigError(f"'{key}' in {source} must say, in a sentence, why {what}")
    return " ".join(value.split())


def _uses(value: Any, options: Mapping[str, RecipeOption], source: Path) -> dict[str, str]:
    uses: dict[str, str] = {}
    for name, pattern in require_mapping(value, "uses", source).items():
        if not _CONTEXT_NAME.match(str(name)) or name in ("source", "context"):
            raise ConfigError(f"'uses.{name}' in {source}: not a usable build context name")
        text = str(pattern)
        for field_name in re.findall(r"\{([^}]*)\}", text):
            if field_name not in options:
                raise ConfigError(
                    f"'uses.{name}' in {source} names {{{field_name}}}, which is not an option"
                    f"{did_you_mean(field_name, options)}"
                )
        uses[str(name)] = text
    return uses


def _arch_targets(value: Any, source: Path) -> dict[str, ArchTarget]:
    found: dict[str, ArchTarget] = {}
    for arch, raw in require_mapping(value, "arch_targets", source).items():
        where = f"arch_targets.{arch}"
        if arch not in BUILD_ARCHES:
            raise ConfigError(f"'{where}' in {source}: valid arches are {', '.join(BUILD_ARCHES)}")
        body = require_mapping(raw, where, source)
        reject_unknown(body, ["target", "why"], where, source)
        if not body.get("target") or not str(body.get("why", "")).strip():
            raise ConfigError(f"'{where}' in {source} needs a target and, in a sentence, why")
        found[str(arch)] = ArchTarget(target=str(body["target"]), why=str(body["why"]).strip())
    return found


def _specifier(value: Any, where: str, source: Path) -> str | None:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    if value is None:
        return None
    try:
        SpecifierSet(str(value))
    except InvalidSpecifier as exc:
        raise ConfigError(
            f"'{where}' in {source} is not a version specifier ('<2.6'): {exc}"
        ) from exc
    return str(value)


def _refusals(value: Any, options: Mapping[str, RecipeOption], source: Path) -> tuple[Refusal, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ConfigError(f"'refuse' in {source} must be a list of rules")
    rules = []
    for index, raw in enumerate(value):
        where = f"refuse[{index}]"
        body = require_mapping(raw, where, source)
        reject_unknown(body, ["arches", "targets", "versions", "glibc", "options", "why", "fix"],
                       where, source)  # fmt: skip
        if not str(body.get("why", "")).strip() or not str(body.get("fix", "")).strip():
            raise ConfigError(f"'{where}' in {source} needs why (the reason) and fix (the way out)")
        wanted = require_mapping(body.get("options"), f"{where}.options", source)
        reject_unknown(wanted, options, f"{where}.options", source)
        rules.append(
            Refusal(
                why=str(body["why"]).strip(),
                fix=str(body["fix"]).strip(),
                arches=_strings(body.get("arches"), f"{where}.arches", source),
                targets=_strings(body.get("targets"), f"{where}.targets", source),
                versions=_specifier(body.get("versions"), f"{where}.versions", source),
                glibc=_specifier(body.get("glibc"), f"{where}.glibc", source),
                options={str(k): str(v) for k, v in wanted.items()},
            )
        )
    return tuple(rules)


def _patches(
    value: Any, context: Path, options: Mapping[str, RecipeOption], source: Path
) -> dict[str, tuple[str, ...]]:
    found: dict[str, tuple[str, ...]] = {}
    for key, raw in require_mapping(value, "patches", source).items():
        for condition in str(key).split()[1:]:
            name, sep, _ = condition.partition("=")
            if not sep or name not in options:
                raise ConfigError(
                    f"'patches.{key}' in {source}: {condition!r} is not OPTION=VALUE of an option "
                    "of the recipe"
                )
        names = _strings(raw, f"patches.{key}", source)
        for name in names:
            if not _PATCH_NAME.match(name):
                raise ConfigError(f"'patches.{key}' in {source} lists {name!r}, not a NAME.patch")
            if not (context / "patches" / name).is_file():
                raise ConfigError(
                    f"'patches.{key}' in {source} lists {name}, which is not in {context / 'patches'}"
                )
        found[str(key)] = names
    return found


def load_recipe(name: str, context: Path, template_dirs: Sequence[Path]) -> Recipe:
    source = context / RECIPE_FILE
    top = require_mapping(load_yaml(source), "", source)
    reject_unknown(top, _TOP_KEYS, "", source)
    versions = require_mapping(top.get("versions"), "versions", source)
    reject_unknown(versions, ["known", "default", "pattern"], "versions", source)
    options = {}
    for opt_name, raw in require_mapping(top.get("options"), "options", source).items():
        where = f"options.{opt_name}"
        if not _OPTION_NAME.match(str(opt_name)):
            raise ConfigError(f"'{where}' in {source}: option names are letters, digits and _")
        body = require_mapping(raw, where, source)
        reject_unknown(body, ["help", "default", "choices", "pattern"], where, source)
        if "default" not in body:
            raise ConfigError(f"'{where}' in {source} needs a default")
        options[str(opt_name)] = RecipeOption(
            name=str(opt_name),
            help=str(body.get("help", "")),
            default=str(body["default"]),
            choices=_strings(body.get("choices"), f"{where}.choices", source),
            pattern=str(body["pattern"]) if "pattern" in body else None,
        )
    per_version: dict[str, dict[str, str]] = {}
    for key, raw in require_mapping(top.get("per_version"), "per_version", source).items():
        body = require_mapping(raw, f"per_version.{key}", source)
        reject_unknown(body, options, f"per_version.{key}", source)
        per_version[str(key)] = {str(k): str(v) for k, v in body.items()}
    per_target: dict[str, dict[str, str]] = {}
    for key, raw in require_mapping(top.get("per_target"), "per_target", source).items():
        body = require_mapping(raw, f"per_target.{key}", source)
        reject_unknown(body, options, f"per_target.{key}", source)
        per_target[str(key)] = {str(k): str(v) for k, v in body.items()}
    artifacts = _strings(top.get("artifacts"), "artifacts", source)
    for kind in artifacts:
        if kind not in ARTIFACT_KINDS:
            raise ConfigError(
                f"'artifacts' in {source} lists '{kind}'.{did_you_mean(kind, ARTIFACT_KINDS)}",
                fix=f"Artifact kinds: {', '.join(ARTIFACT_KINDS)}.",
            )
    arches = _strings(top.get("arches"), "arches", source) or BUILD_ARCHES
    for arch in arches:
        if arch not in BUILD_ARCHES:
            raise ConfigError(
                f"'arches' in {source} lists '{arch}'; valid: {', '.join(BUILD_ARCHES)}"
            )
    for list_name in ("apt", "runtime_apt"):
        for pkg in _strings(top.get(list_name), list_name, source):
            if not _APT_NAME.match(pkg):
                raise ConfigError(
                    f"'{list_name}' in {source} lists {pkg!r}, not a Debian package name"
                )
    package = top.get("package", "none")
    if package not in ("none", "required"):
        raise ConfigError(f"'package' in {source} must be 'none' or 'required'")
    template_name = str(top.get("template", f"{name}.Dockerfile.j2"))
    template = next(
        (d / template_name for d in template_dirs if (d / template_name).is_file()), None
    )
    if template is None:
        raise ConfigError(
            f"Recipe '{name}' ({source}) has no template {template_name} in "
            f"{', '.join(str(d) for d in template_dirs)}"
        )
    known = _strings(versions.get("known"), "versions.known", source)
    default = versions.get("default")
    pattern = str(versions.get("pattern", r"[0-9]+(\.[0-9]+)*"))
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ConfigError(
            f"'versions.pattern' in {source} is not a regular expression: {exc}"
        ) from exc
    for v in (*known, *([str(default)] if default is not None else [])):
        if not re.fullmatch(pattern, v):
            raise ConfigError(
                f"Version '{v}' in {source} does not match versions.pattern {pattern}"
            )
    recipe = Recipe(
        name=name,
        description=str(top.get("description", name)),
        template=template,
        context=context,
        versions=known,
        default_version=str(default) if default is not None else None,
        version_pattern=pattern,
        needs_package=package == "required",
        options=options,
        per_version=per_version,
        artifacts=artifacts or ("wheel",),
        apt=_strings(top.get("apt"), "apt", source),
        runtime_apt=_strings(top.get("runtime_apt"), "runtime_apt", source),
        smoke=_strings(top.get("smoke"), "smoke", source),
        arches=arches,
        targets=_strings(top.get("targets"), "targets", source),
        source=source,
        no_hybrid=_reason(top.get("no_hybrid"), source),
        source_markers=_strings(top.get("source_markers"), "source_markers", source),
        needs_source=_reason(top.get("needs_source"), source, "needs_source"),
        uses=_uses(top.get("uses"), options, source),
        native_python=_native_python(top.get("native_python"), source),
        arch_targets=_arch_targets(top.get("arch_targets"), source),
        per_target=per_target,
        refusals=_refusals(top.get("refuse"), options, source),
        patches=_patches(top.get("patches"), context, options, source),
    )
    for default_value in (opt.default for opt in options.values()):
        if not SAFE_VALUE.match(default_value):
            raise ConfigError(f"An option default in {source} holds shell characters")
    return recipe


def load_recipes() -> dict[str, Recipe]:
    """Every recipe, the project's (working directory) before the built-in ones."""
    recipes: dict[str, Recipe] = {}
    template_dirs = paths.template_dirs()
    for contexts in reversed(paths.context_dirs()):
        for context in sorted(p for p in contexts.iterdir() if (p / RECIPE_FILE).is_file()):
            if not _RECIPE_NAME.match(context.name):
                raise ConfigError(f"Recipe directory {context} is not named in lowercase-dashes")
            recipes[context.name] = load_recipe(context.name, context, template_dirs)
    return dict(sorted(recipes.items()))


def find_recipe(recipes: Mapping[str, Recipe], name: str) -> Recipe:
    if name in recipes:
        return recipes[name]
    raise UsageError(
        f"Unknown recipe '{name}'.{did_you_mean(name, recipes)}",
        fix=f"Valid recipes: {', '.join(recipes)} (dockerarch recipes lists them); for any "
        "PyPI package use: dockerarch build wheel --package 'NAME==VERSION'.",
    )


_GENERATOR = re.compile(
    r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$|^[A-Za-z0-9_./-]+\.py$"
    r"|^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)+$"  # a script without .py: bin/cython
)


def _native_python(raw: object, source: Path) -> tuple[str, ...]:
    names = _strings(raw, "native_python", source)
    for name in names:
        if not _GENERATOR.match(name) or ".." in name.split("/"):
            raise ConfigError(
                f"'native_python' in {source} lists {name!r}, neither a module name "
                "(torchgen.gen) nor a script path (tools/gen.py, bin/cython)"
            )
    return names

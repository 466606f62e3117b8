from __future__ import annotations

import pytest

from dockerarch.errors import UsageError
from dockerarch.recipes import load_recipes, parse_package_spec, parse_set

REQUIRED_RECIPES = {"wheel", "torch", "torchvision", "opencv", "numpy", "vaccel", "qpulib"}


def test_required_recipes_exist_with_metadata() -> None:
    recipes = load_recipes()
    assert REQUIRED_RECIPES <= set(recipes)
    for recipe in recipes.values():
        assert recipe.template.name == f"{recipe.name}.Dockerfile.j2"
        assert recipe.context.name == recipe.name
        assert recipe.artifacts
        if not recipe.needs_package:
            assert recipe.default_version in recipe.versions
            assert recipe.smoke, f"{recipe.name} has no smoke command"


@pytest.mark.parametrize(
    ("spec", "name", "version"),
    [
        ("zstandard==0.23.0", "zstandard", "0.23.0"),
        ("Pillow[tiff]==10.4.0", "Pillow", "10.4.0"),
        ("numpy>=1.26,<2", "numpy", None),
        ("python-snappy", "python-snappy", None),
        ("cffi ==1.17.1", "cffi", "1.17.1"),
    ],
)
def test_package_specs(spec: str, name: str, version: str | None) -> None:
    parsed = parse_package_spec(spec)
    assert (parsed.name, parsed.version) == (name, version)


@pytest.mark.parametrize(
    "spec",
    ["zstandard==0.23.0; rm -rf /", "zstandard==$(id)", "zstandard==`id`", "zst'andard",
     'zstandard"', "zstandard==0.23.0\nRUN id", "https://evil.example.invalid/x.tar.gz",
     "zstandard @ file:///etc", "", "==1.0"],
)  # fmt: skip
def test_package_specs_that_could_reach_a_shell_are_refused(spec: str) -> None:
    with pytest.raises(UsageError, match="not a package spec"):
        parse_package_spec(spec)


def test_per_version_option_defaults() -> None:
    torch = load_recipes()["torch"]
    assert torch.resolve_options("2.3.1", {})["USE_DISTRIBUTED"] == "1"
    assert torch.resolve_options("1.4.0", {})["USE_DISTRIBUTED"] == "0"
    old = torch.resolve_options("1.1.0", {})
    assert old["USE_OPENCV"] == "1" and old["BUILD_CUSTOM_PROTOBUF"] == "0"
    assert torch.resolve_options("1.4.0", {"USE_DISTRIBUTED": "1"})["USE_DISTRIBUTED"] == "1"
    vision = load_recipes()["torchvision"]
    assert vision.resolve_options("0.16.2", {})["TORCH_VERSION"] == "2.1.2"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("USE_CUDA", "2", "Choose one of: 0, 1"),
        ("USE_CUDAA", "1", "Did you mean 'USE_CUDA'?"),
        ("MAX_JOBS", "2; id", "must match"),
        ("SOURCE", "https://x.example.invalid/$(id)", "must match"),
        ("SOURCE", "https://x.example.invalid/a'b", "must match"),
    ],
)
def test_bad_options(key: str, value: str, message: str) -> None:
    torch = load_recipes()["torch"]
    with pytest.raises(UsageError) as caught:
        torch.resolve_options("2.3.1", {key: value})
    assert message in caught.value.message


@pytest.mark.parametrize("version", ["2.3", "2.3.1;id", "v2.3.1", "2.3.1\n", "$(id)"])
def test_bad_versions(version: str) -> None:
    with pytest.raises(UsageError, match="not a valid version of recipe 'torch'"):
        load_recipes()["torch"].check_version(version)


def test_parse_set() -> None:
    assert parse_set(["A=1", "B = x=y"]) == {"A": "1", "B": "x=y"}
    with pytest.raises(UsageError, match="not KEY=VALUE"):
        parse_set(["novalue"])


def _recipe_from(tmp_path, text: str):  # type: ignore[no-untyped-def]
    from dockerarch.recipes import load_recipe

    (tmp_path / "t.Dockerfile.j2").write_text("FROM scratch\n")
    context = tmp_path / "t"
    context.mkdir(exist_ok=True)
    (context / "recipe.yaml").write_text(
        'versions: {known: ["1.0", "2.0"], default: "2.0"}\n'
        "options: {MODE: {default: a, choices: [a, b]}}\n" + text
    )
    return load_recipe("t", context, [tmp_path])


def test_refusals_hold_only_when_every_condition_does(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from dockerarch.targets import load_targets

    recipe = _recipe_from(
        tmp_path,
        "refuse:\n  - {arches: [armv7], versions: '>=2', options: {MODE: b}, why: w, fix: f}\n",
    )
    targets = load_targets()
    armv7, aarch64 = targets["debian-armv7"], targets["debian-aarch64"]
    recipe.check_combination(aarch64, "2.0", {"MODE": "b"})  # another arch
    recipe.check_combination(armv7, "1.0", {"MODE": "b"})  # another version
    recipe.check_combination(armv7, "2.0", {"MODE": "a"})  # another option
    recipe.check_combination(armv7, "master", {"MODE": "b"})  # no number: no version rule holds
    with pytest.raises(
        UsageError, match=r"t 2\.0 for debian-armv7 \(debian bookworm, glibc 2\.36\): w"
    ):
        recipe.check_combination(armv7, "2.0", {"MODE": "b"})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("refuse:\n  - {arches: [armv7], why: w}\n", "needs why"),
        ("refuse:\n  - {versions: '=>2', why: w, fix: f}\n", "not a version specifier"),
        ("refuse:\n  - {options: {NOPE: x}, why: w, fix: f}\n", "NOPE"),
        ("refuse: {why: w}\n", "must be a list"),
        ("arch_targets: {armv9: {target: x, why: y}}\n", "valid arches"),
        ("arch_targets: {armv7: {target: trixie-armv7}}\n", "why"),
        ("per_target: {'trixie-*': {NOPE: x}}\n", "NOPE"),
        ("patches: {'2.*': [missing.patch]}\n", "which is not in"),
        ("patches: {'2.*': ['../x.patch']}\n", "not a NAME.patch"),
        ("patches: {'2.* NOPE=1': []}\n", "not OPTION=VALUE"),
    ],
)
def test_bad_recipe_rules_are_configuration_errors(tmp_path, text: str, message: str) -> None:  # type: ignore[no-untyped-def]
    from dockerarch.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        _recipe_from(tmp_path, text)


def test_patches_are_chosen_by_version(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "t" / "patches").mkdir(parents=True)
    for name in ("a.patch", "b.patch"):
        (tmp_path / "t" / "patches" / name).write_text("")
    recipe = _recipe_from(
        tmp_path, "patches: {'2.*': [a.patch], '2.* MODE=b': [b.patch], '1.*': [b.patch]}\n"
    )
    assert recipe.patches_for("2.0", {"MODE": "a"}) == ["a.patch"]
    assert recipe.patches_for("2.0", {"MODE": "b"}) == ["a.patch", "b.patch"]
    assert recipe.patches_for("1.0", {"MODE": "a"}) == ["b.patch"]
    assert recipe.patches_for("3.0", {"MODE": "b"}) == []

"""dockerarch installed as users install it: its wheel in a fresh virtual environment, used from
a directory that is not the checkout. Everything it needs at run time (recipes, Dockerfile
templates, the hybrid toolchain's files, targets, the default registry configuration) must come
from the wheel itself.

The wheel is built without build isolation (hatchling is in the test extra), so nothing is
downloaded for it; installing it fetches its dependencies through pip's default index, as
`pipx install` does for a user."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Mapping
from pathlib import Path

import pytest

from .conftest import REPO, dockerarch

CEXT = REPO / "tests" / "fixtures" / "cext"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "-q", "-w", str(out), str(REPO)],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    (built,) = out.glob("dockerarch-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with only the wheel (and its dependencies) in it."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    done = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--disable-pip-version-check", "-q", str(wheel)],
        capture_output=True, text=True, timeout=900, env=_clean_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return venv


def _clean_env() -> dict[str, str]:
    """The environment minus anything that would lead Python back to the checkout."""
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "DOCKERARCH_PROJECT", "DOCKERARCH_REGISTRY_CONFIG")
    return {k: v for k, v in os.environ.items() if k not in drop}


def run_installed(
    venv: Path, *args: str, cwd: Path, timeout: float = 300, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv / "bin" / "dockerarch"), *args],
        capture_output=True, text=True, cwd=cwd, timeout=timeout, check=False,
        env={**_clean_env(), **(env or {})},
    )  # fmt: skip


def test_wheel_carries_recipes_toolchain_and_defaults(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for path in [
        "dockerarch/_builtin/dockerfiles/_partials/layout.Dockerfile.j2",
        "dockerarch/_builtin/dockerfiles/torch.Dockerfile.j2",
        "dockerarch/_builtin/contexts/vaccel/make-deb",
        "dockerarch/_builtin/contexts/qpulib/recipe.yaml",
        "dockerarch/data/toolchain/collect-toolchain",
        "dockerarch/data/toolchain/dockerarch-cc.c",
        "dockerarch/data/toolchain/fetch-sdist",
        "dockerarch/data/targets.yaml",
        "dockerarch/data/registry.yaml",
    ]:
        assert path in names, path
    # Every recipe of the checkout is in the wheel.
    for recipe in sorted((REPO / "contexts").iterdir()):
        assert f"dockerarch/_builtin/contexts/{recipe.name}/recipe.yaml" in names


def test_every_module_the_wheel_imports_is_a_declared_dependency(wheel: Path) -> None:
    """Each third-party module dockerarch's code imports (parsed from the wheel's own .py
    files) is provided by a distribution its metadata requires, with a floor (or pinned)."""
    import ast
    import re
    from importlib.metadata import packages_distributions

    with zipfile.ZipFile(wheel) as archive:
        sources = [archive.read(n) for n in archive.namelist()
                   if n.startswith("dockerarch/") and n.endswith(".py")]  # fmt: skip
        (meta,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = archive.read(meta).decode()
    imported = set()
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    third_party = sorted(imported - set(sys.stdlib_module_names) - {"dockerarch", "__future__"})
    required = {
        re.split(r"[ ;<>=!~\[(]", line.removeprefix("Requires-Dist: "), maxsplit=1)[0].lower()
        .replace("_", "-"): line
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist: ") and "extra ==" not in line
    }  # fmt: skip
    providers = packages_distributions()
    assert third_party, "no imports found: the wheel's sources were not read"
    for module in third_party:
        dists = {d.lower().replace("_", "-") for d in providers.get(module, [module])}
        declared = [required[d] for d in dists if d in required]
        assert declared, f"{module} is imported but no distribution of it is required: {dists}"
        # a floor, or an exact pin (oras: a private surface, tests/unit/test_private_surfaces.py)
        assert ">=" in declared[0] or "==" in declared[0], declared[0]


def test_installed_wheel_runs_outside_the_checkout(installed: Path, tmp_path: Path) -> None:
    where = subprocess.run(
        [str(installed / "bin" / "python"), "-c", "import dockerarch; print(dockerarch.__file__)"],
        capture_output=True, text=True, cwd=tmp_path, check=True, env=_clean_env(),
    )  # fmt: skip
    assert Path(where.stdout.strip()).is_relative_to(installed), where.stdout

    version = run_installed(installed, "--version", cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.startswith("dockerarch "), version.stderr

    listed = run_installed(installed, "recipes", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    recipes = {r["name"]: r for r in json.loads(listed.stdout)}
    assert set(recipes) == {p.name for p in (REPO / "contexts").iterdir()}
    assert all(str(installed) in r["source"] for r in recipes.values())

    ours = run_installed(installed, "generate", "torch", "--arch", "armv7", cwd=tmp_path)
    checkout = dockerarch("generate", "torch", "--arch", "armv7")
    assert ours.returncode == 0 and checkout.returncode == 0, ours.stderr + checkout.stderr
    assert ours.stdout == checkout.stdout  # the same bytes as from the checkout

    targets = run_installed(installed, "targets", "show", "pynq-zu", cwd=tmp_path)
    assert targets.returncode == 0 and "aarch64-linux-gnu" in targets.stdout, targets.stderr


def test_installed_wheel_builds_the_fixture_hybrid(installed: Path, tmp_path: Path) -> None:
    shutil.copytree(CEXT, tmp_path / "cext")
    done = run_installed(
        installed, "build", "wheel", "--package", "./cext", "--arch", "aarch64", "--out", "dist",
        cwd=tmp_path, timeout=3600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = tmp_path / "dist" / "debian-aarch64" / "dockerarch_tinyext-1.0.0"
    wheel = result / "dockerarch_tinyext-1.0.0-cp311-cp311-linux_aarch64.whl"
    assert str(wheel.relative_to(tmp_path)) in done.stdout.splitlines()
    data = json.loads((result / "manifest.json").read_text())
    assert data["accel"] == "hybrid" and data["smoke"] == "imported tinyext tinyhelp tinyxx"
    assert data["hybrid"]["emulated"] == 0 and data["hybrid"]["native"] == data["hybrid"]["runs"]

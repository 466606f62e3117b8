"""A recipe that builds Debian's source package of the target's suite (as the torch recipe's
SOURCE=debian does): fetched with apt-get source from the mirror the target's base was made from,
Debian's patches applied and counted, refused with the version Debian has when it is not the one
asked for; natively in hybrid builds, in the emulated build stage in plain ones."""

from __future__ import annotations

import re
import tarfile
from pathlib import Path

import pytest

from .conftest import dockerarch

PACKAGE = "cjson"  # small (two C files and a test program, cmake), with Debian patches in bookworm
TEMPLATE = """\
{% extends "_partials/layout.Dockerfile.j2" %}
{% import "_partials/macros.j2" as m with context %}
{% block build_packages %}
{{ m.apt_install(recipe.apt + ([] if toolchain else ["dpkg-dev"])) }}
{% endblock %}
{% block native_sources %}
{{ m.debian_source_native("cjson", recipe.version, "/sources/cjson") }}
{% endblock %}
{% block build %}
{% if toolchain %}
COPY --from=sources /sources/cjson /src/cjson
{% else %}
{{ m.debian_source("cjson", recipe.version, "/src/cjson") }}
{% endif %}
RUN {{ m.compile_mounts(trail=" ") }}cmake -S /src/cjson -B /src/cjson/build -G Ninja \\
    -DCMAKE_BUILD_TYPE=Release -DENABLE_CJSON_TEST=On -DENABLE_CJSON_UTILS=Off \\
 && cmake --build /src/cjson/build -j 2 \\
 && DESTDIR=/stage cmake --install /src/cjson/build --prefix /usr/local \\
 && install -D /src/cjson/build/cJSON_test /stage/usr/local/bin/cJSON_test \\
 && install -D -m 644 /src/cjson/debian/patches/series /stage/usr/local/share/cjson/series \\
 && install -D -m 644 /src/cjson/.pc/applied-patches /stage/usr/local/share/cjson/applied \\
 && tar -C /stage --sort=name --owner=0 --group=0 --numeric-owner \\
        -czf /out/cjson-{{ recipe.version }}.tar.gz .
{% endblock %}
"""


def write_project(path: Path, versions: list[str]) -> Path:
    context = path / "contexts" / PACKAGE
    context.mkdir(parents=True, exist_ok=True)
    (context / "recipe.yaml").write_text(
        "description: Debian's cJSON source package, for the tests\n"
        f"versions: {{known: [{', '.join(repr(v) for v in versions)}], default: {versions[0]!r}}}\n"
        "artifacts: [tarball]\n"
        "apt: [build-essential, cmake, ninja-build]\n"
        "smoke: [sh, -c, 'cJSON_test > /tmp/said && head -n 1 /tmp/said']\n"
    )
    (path / "dockerfiles").mkdir(exist_ok=True)
    (path / "dockerfiles" / f"{PACKAGE}.Dockerfile.j2").write_text(TEMPLATE)
    return path


@pytest.fixture(scope="module")
def debian_version(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The upstream version of Debian's cjson, as a build asking for another one is told it."""
    done = dockerarch("base", "bootstrap", "--arch", "armv7", "--no-push", timeout=3600)
    assert done.returncode == 0, done.stderr
    project = write_project(tmp_path_factory.mktemp("wrong"), ["0.1"])
    refused = dockerarch("build", PACKAGE, "--arch", "armv7", "--out", str(project / "dist"),
                         cwd=project, timeout=1800)  # fmt: skip
    said = " ".join(refused.stderr.split())
    assert refused.returncode == 6, said
    assert "Traceback" not in said
    found = re.search(
        r"Debian's source package cjson here is upstream version (\S+), not 0\.1: "
        r"build --version ([0-9.]+), or give the source with --source\.",
        said,
    )
    assert found, said[-3000:]
    upstream, version = found.groups()
    assert upstream.startswith(version)
    assert not (project / "dist" / "debian-armv7" / "cjson-0.1").exists()
    return version


def test_a_version_debian_does_not_have_is_refused_in_plain_builds_too(
    debian_version: str, tmp_path: Path
) -> None:
    project = write_project(tmp_path, ["0.1"])
    refused = dockerarch("build", PACKAGE, "--arch", "armv7", "--accel", "none",
                         "--out", str(tmp_path / "dist"), cwd=project, timeout=1800)  # fmt: skip
    said = " ".join(refused.stderr.split())
    assert refused.returncode == 6, said
    assert f"upstream version {debian_version}" in said and "not 0.1" in said, said[-3000:]


def test_debians_source_package_builds_with_its_patches_applied(
    debian_version: str, tmp_path: Path
) -> None:
    project = write_project(tmp_path, [debian_version])
    out = tmp_path / "dist"
    done = dockerarch("build", PACKAGE, "--arch", "armv7", "--out", str(out), cwd=project,
                      timeout=1800)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    said = " ".join(done.stderr.split())
    result = out / "debian-armv7" / f"cjson-{debian_version}"
    (tarball,) = result.glob("*.tar.gz")
    with tarfile.open(tarball) as tar:
        names = tar.getnames()
        series, applied = (
            tar.extractfile(f"./usr/local/share/cjson/{name}").read().decode().split()  # type: ignore[union-attr]
            for name in ("series", "applied")
        )
    # Debian's tree, with every patch of its series applied (quilt's record), and there are some
    assert applied == [p for p in series if not p.startswith("#")] and len(applied) >= 1
    assert any(re.fullmatch(r"\./usr/local/lib/libcjson\.so\.\S+", n) for n in names), names
    # the library built from Debian's tree runs on the target and says its version
    assert f"smoke test passed: Version: {debian_version}" in said, said[-2000:]

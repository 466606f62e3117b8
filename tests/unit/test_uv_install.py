"""pip-install's install from local files (data/toolchain/dockerarch_uv_install.py): which
installs the x86-64 uv takes, and which files it byte-compiles afterwards."""

from __future__ import annotations

import importlib.util
import os
import sys
import zipfile
from pathlib import Path
from types import ModuleType

from dockerarch import paths


def _module() -> ModuleType:
    path = paths.data_path("toolchain") / "dockerarch_uv_install.py"
    spec = importlib.util.spec_from_file_location("dockerarch_uv_install", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


UV_INSTALL = _module()


def wheel(where: Path, name: str, *requires: str) -> str:
    path = where / f"{name}-1.0-cp311-cp311-linux_armv7l.whl"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{name}-1.0.dist-info/METADATA", metadata)
        archive.writestr(f"{name}/__init__.py", "")
    return str(path)


def test_uv_takes_installs_that_need_no_index(tmp_path: Path) -> None:
    alone, asking = wheel(tmp_path, "alone"), wheel(tmp_path, "asking", "numpy>=1.26")
    # a set's install (--no-index): as given, pip's --no-cache-dir left out (uv has its own)
    local_only = UV_INSTALL.local_only
    args = ["--no-cache-dir", "--no-index", "--find-links", "/set", asking]
    assert local_only(args) == ["--no-index", "--find-links", "/set", asking]
    # wheel files whose metadata asks for nothing: nothing for an index to give
    assert local_only(["--no-cache-dir", "--find-links", "/artifacts", alone]) == [
        "--no-index", "--find-links", "/artifacts", alone
    ]  # fmt: skip
    # an index may be asked: a wheel with Requires-Dist, a requirement, an option it does not
    # know, a file that is not a wheel archive, no wheel at all
    broken = tmp_path / "broken-1.0-py3-none-any.whl"
    broken.write_bytes(b"not a zip")
    for asked in ([alone, asking], [alone, "numpy"], ["--pre", alone], [str(broken)],
                  ["--find-links", "/artifacts"]):  # fmt: skip
        assert local_only(asked) is None, asked


def test_what_is_compiled_is_the_python_files_written_since_the_install_began(
    tmp_path: Path,
) -> None:
    site = tmp_path / "dist-packages"
    (site / "old").mkdir(parents=True)
    (site / "new" / "sub").mkdir(parents=True)
    for name in ("old/a.py", "new/b.py", "new/sub/c.py", "new/data.txt"):
        (site / name).write_text("x = 1\n")
    os.utime(site / "old/a.py", ns=(1_000_000_000, 1_000_000_000))
    since = (site / "new/b.py").stat().st_mtime_ns
    found = list(UV_INSTALL.newer_sources([str(site)], since))
    assert found == [str(site / "new/b.py"), str(site / "new/sub/c.py")]
    UV_INSTALL.byte_compile(found)
    assert sorted(p.name for p in site.rglob("*.pyc")) == [
        f"b.{sys.implementation.cache_tag}.pyc", f"c.{sys.implementation.cache_tag}.pyc"
    ]  # fmt: skip

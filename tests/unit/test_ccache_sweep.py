"""The shared compiler cache's size keeper (dockerarch/data/ccache_sweep.py, which setup-host
runs as the cache's user), on real files: the least recently used objects go first, down to 90%
of the limit, and nothing goes while everything fits."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from types import ModuleType

import pytest

import dockerarch
from dockerarch.doctor import _store_size  # at import: requests' ssl before sockets are closed


def sweeper() -> ModuleType:
    path = Path(dockerarch.__file__).parent / "data" / "ccache_sweep.py"
    spec = importlib.util.spec_from_file_location("ccache_sweep", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("text", "size"), [("20G", 20 << 30), ("512M", 512 << 20), ("1.5T", int(1.5 * (1 << 40))),
                                            ("4096", 4096), ("64KiB", 64 << 10)])  # fmt: skip
def test_sizes_read_as_ccache_writes_them(text: str, size: int) -> None:
    assert sweeper().parse_size(text) == size


@pytest.mark.parametrize("text", ["0", "twenty", "-1G", "1Q"])
def test_a_size_that_is_not_one_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="is not a size"):
        sweeper().parse_size(text)


def test_the_least_recently_used_objects_go_first(tmp_path: Path) -> None:
    sweep = sweeper()
    store = tmp_path / "store"
    (store / "aaaa").mkdir(parents=True)
    for i in range(10):  # obj0 written last; obj5 read recently (its access time is newest)
        path = store / "aaaa" / f"obj{i}"
        path.write_bytes(b"x" * 1000)
        os.utime(path, (1_700_000_000 + 100 - i, 1_700_000_000 + 100 - i))
    os.utime(store / "aaaa" / "obj5", (1_700_000_500, 1_700_000_000))
    assert sweep.sweep(str(store), 10_000)["evicted"] == 0  # it fits: nothing goes
    status = sweep.sweep(str(store), 8_000)  # over: down to 7,200 bytes, oldest use first
    left = sorted(p.name for p in (store / "aaaa").iterdir())
    assert left == ["obj0", "obj1", "obj2", "obj3", "obj4", "obj5", "obj6"]
    assert status == {**status, "bytes": 7000, "objects": 7, "evicted": 3, "freed": 3000}
    status_file = tmp_path / "sweep.json"
    assert (
        sweep.main(
            ["--store", str(store), "--max-size", "4K", "--status", str(status_file), "--once"]
        )
        == 0
    )
    written = json.loads(status_file.read_text())
    assert written["limit"] == 4096 and written["bytes"] <= 0.9 * 4096
    assert (store / "aaaa" / "obj5").exists()  # read recently: kept over newer writes


def test_doctor_says_what_the_cache_holds_against_its_limit(tmp_path: Path) -> None:
    assert _store_size(tmp_path) == ""  # no size keeper ran here
    (tmp_path / "ccache" / "logs").mkdir(parents=True)
    (tmp_path / "ccache" / "logs" / "sweep.json").write_text(
        json.dumps({"bytes": 3 << 30, "limit": 20 << 30, "evicted_since_start": 12})
    )
    assert _store_size(tmp_path) == (
        "; holds 3.00 GiB of its 20.0 GiB limit (12 least recently used objects removed)"
    )

from __future__ import annotations

import json
from pathlib import Path

from dockerarch import doctor
from dockerarch.config import IndexConfig, RegistryConfig

from .conftest import dockerarch, doctor_on_this_disk, free_gib_under_docker_root


def test_every_check_passes_on_a_set_up_machine() -> None:
    # The default (10 GiB free) is proved on both sides by the two runs below.
    done, failing = doctor_on_this_disk()
    assert failing == [], failing
    report = json.loads(done.stdout)
    assert report["ok"] is True and done.returncode == 0
    names = {c["name"] for c in report["checks"]}
    assert {
        "docker daemon", "buildx", "binfmt armv7", "binfmt aarch64", "builder platforms",
        "run armv7 binary", "run aarch64 binary", "registry", "disk space",
    } <= names  # fmt: skip


def test_disk_space_is_measured_where_docker_keeps_its_data() -> None:
    free = free_gib_under_docker_root()
    done = dockerarch("doctor", "--json", "--min-free-gib", f"{free + 50:.0f}")
    assert done.returncode == 1
    disk = next(c for c in json.loads(done.stdout)["checks"] if c["name"] == "disk space")
    assert not disk["ok"] and f"builds want at least {free + 50:.0f} GiB" in disk["detail"]
    shown = float(disk["detail"].split(" GiB free under ")[0])
    assert abs(shown - free) < 1, (shown, free)  # the same disk the test measured
    assert "dockerarch prune" in disk["fix"]
    default = json.loads(dockerarch("doctor", "--json").stdout)
    disk = next(c for c in default["checks"] if c["name"] == "disk space")
    assert disk["ok"] is (free_gib_under_docker_root() >= 10) or abs(free - 10) < 0.5, disk


def test_table_form() -> None:
    room = max(free_gib_under_docker_root() - 1, 0)
    done = dockerarch("doctor", "--min-free-gib", f"{room:.1f}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ready to build for ARM" in done.stdout
    assert "FAIL" not in done.stdout


def test_dead_docker_host_fails_clearly(tmp_path: Path) -> None:
    done = dockerarch("doctor", env={"DOCKER_HOST": f"unix://{tmp_path}/no-daemon.sock"})
    assert done.returncode == 1
    assert "FAIL  docker daemon" in done.stdout
    assert f"the socket {tmp_path}/no-daemon.sock does not exist" in done.stdout
    assert "fix: Start one with scripts/setup-host" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


def test_dead_tcp_docker_host_fails_clearly() -> None:
    done = dockerarch("doctor", "--json", env={"DOCKER_HOST": "tcp://127.0.0.1:1"})
    assert done.returncode == 1
    daemon = json.loads(done.stdout)["checks"][0]
    assert daemon["name"] == "docker daemon" and not daemon["ok"]
    assert "tcp://127.0.0.1:1" in daemon["detail"]


def test_registry_from_registry_yaml_is_the_one_checked(tmp_path: Path) -> None:
    (tmp_path / "registry.yaml").write_text("registry:\n  address: 127.0.0.1:1\n")
    done = dockerarch("doctor", cwd=tmp_path)
    assert done.returncode == 1
    assert "FAIL  registry" in done.stdout
    assert "http://127.0.0.1:1/v2/" in done.stdout
    assert str(tmp_path / "registry.yaml") in done.stdout


def test_registry_nobody_listening() -> None:
    result = doctor.check_registry(RegistryConfig(address="127.0.0.1:9"))
    assert not result.ok and "nothing answers at http://127.0.0.1:9/v2/" in result.detail
    assert result.fix is not None and "scripts/setup-host" in result.fix


def test_the_package_index_is_checked() -> None:
    result = doctor.check_index(RegistryConfig())  # the one scripts/setup-host runs
    assert result.ok, result.detail
    assert "devpi-server" in result.detail and "/dockerarch/" in result.detail
    dead = IndexConfig(
        url="http://127.0.0.1:9/d/{target}/", simple="http://127.0.0.1:9/d/{target}/s/"
    )
    result = doctor.check_index(RegistryConfig(index=dead))
    assert not result.ok and "nothing answers at http://127.0.0.1:9" in result.detail
    assert result.fix is not None and "scripts/setup-host" in result.fix

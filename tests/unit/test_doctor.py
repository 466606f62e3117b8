from __future__ import annotations

from pathlib import Path

import pytest

from dockerarch import binfmt, doctor, engine
from dockerarch.cli.doctor import render_table
from dockerarch.errors import EngineError

ARM = """enabled
interpreter {interp}
flags: {flags}
offset 0
magic 7f454c4601010100000000000000000002002800
mask ffffffffffffff00fffffffffffffffffeffffff
"""


def _arm_entry(tmp_path: Path, flags: str = "PF", state: str = "enabled") -> binfmt.BinfmtEntry:
    interp = tmp_path / "qemu-arm"
    interp.write_text("")
    text = ARM.format(interp=interp, flags=flags).replace("enabled", state, 1)
    entry = binfmt.parse_entry("qemu-arm", text)
    assert entry is not None
    return entry


def test_binfmt_pass(tmp_path: Path) -> None:
    result = doctor.check_binfmt("armv7", [_arm_entry(tmp_path)])
    assert result.ok and "qemu-arm" in result.detail


def test_binfmt_without_f_flag_fails_with_fix(tmp_path: Path) -> None:
    result = doctor.check_binfmt("armv7", [_arm_entry(tmp_path, flags="P")])
    assert not result.ok
    assert "F (fix-binary) flag" in result.detail
    assert result.fix is not None and "update-binfmts --enable qemu-arm" in result.fix


def test_binfmt_disabled(tmp_path: Path) -> None:
    result = doctor.check_binfmt("armv7", [_arm_entry(tmp_path, state="disabled")])
    assert not result.ok and "disabled" in result.detail


def test_binfmt_interpreter_missing(tmp_path: Path) -> None:
    entry = _arm_entry(tmp_path)
    Path(entry.interpreter).unlink()
    result = doctor.check_binfmt("armv7", [entry])
    assert not result.ok and "does not exist" in result.detail


def test_binfmt_no_entry_and_not_mounted(tmp_path: Path) -> None:
    missing = doctor.check_binfmt("aarch64", [_arm_entry(tmp_path)])
    assert not missing.ok and "no binfmt_misc entry runs aarch64" in missing.detail
    unmounted = doctor.check_binfmt("aarch64", None)
    assert (
        not unmounted.ok and unmounted.fix is not None and "mount -t binfmt_misc" in unmounted.fix
    )


def test_old_buildx_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine, "buildx_version", lambda: "0.10.4")
    result = doctor.check_buildx()
    assert not result.ok and "0.10.4 is older than 0.12" in result.detail
    monkeypatch.setattr(engine, "buildx_version", lambda: "0.13.1")
    assert doctor.check_buildx().ok


def test_builder_without_arm_platforms(monkeypatch: pytest.MonkeyPatch) -> None:
    info = engine.BuilderInfo(
        name="default", driver="docker", platforms=("linux/amd64", "linux/arm64")
    )
    monkeypatch.setattr(engine, "current_builder", lambda: info)
    result = doctor.check_builder(daemon_ok=True)
    assert not result.ok and "does not list linux/arm/v7" in result.detail
    skipped = doctor.check_builder(daemon_ok=False)
    assert skipped.skipped and not skipped.ok


def test_daemon_failure_keeps_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    def dead() -> engine.DaemonInfo:
        raise EngineError(
            "No Docker daemon answers: the socket /x.sock does not exist", fix="Start it."
        )

    monkeypatch.setattr(engine, "daemon_info", dead)
    result = doctor.check_daemon()
    assert not result.ok and "/x.sock" in result.detail and result.fix == "Start it."


def test_disk_below_threshold(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(engine, "docker_root_dir", lambda: str(tmp_path))
    monkeypatch.setattr(engine, "build_cache_size", lambda: None)
    assert doctor.check_disk(True, min_free_gib=0).ok
    result = doctor.check_disk(True, min_free_gib=10**9)
    assert not result.ok and "builds want at least" in result.detail
    assert "BuildKit" not in result.detail  # the engine did not say


def test_low_disk_says_how_much_buildkit_s_cache_holds(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(engine, "docker_root_dir", lambda: str(tmp_path))
    monkeypatch.setattr(engine, "build_cache_size", lambda: 12_345_000_000)
    result = doctor.check_disk(True, min_free_gib=10**9)
    assert f"GiB free under {tmp_path}; BuildKit's cache there holds 12.3 GB" in result.detail
    assert (
        result.fix is not None and "'docker builder prune' empties BuildKit's cache" in result.fix
    )
    # with the limit setup-host gave dockerd
    (tmp_path / "dockerd.json").write_text(
        '{"builder": {"gc": {"enabled": true, "defaultKeepStorage": "40GB"}}}'
    )
    result = doctor.check_disk(True, min_free_gib=0, state_dir=tmp_path)
    assert result.ok and result.detail.endswith("holds 12.3 GB of its 40GB limit")
    (tmp_path / "dockerd.json").write_text("{not json")
    assert doctor.check_disk(True, 0, tmp_path).detail.endswith("holds 12.3 GB")


def test_a_crashing_check_still_yields_a_row() -> None:
    def crash() -> doctor.CheckResult:
        raise KeyError("boom")

    result = doctor._guarded("weird", crash)
    assert not result.ok and "KeyError" in result.detail


def test_table_marks_and_fix_lines() -> None:
    rows = [
        doctor.CheckResult(name="docker daemon", ok=True, detail="Docker 26"),
        doctor.CheckResult(name="registry", ok=False, detail="down", fix="Start it."),
    ]
    table = render_table(rows)
    assert "  ok    docker daemon  Docker 26" in table
    assert "  FAIL  registry       down" in table
    assert "fix: Start it." in table
    assert table.endswith("1 of 2 checks passed; 1 required check failed.")


def test_the_compiler_cache_check_says_what_a_build_would_find(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from dockerarch import compilercache
    from dockerarch.config import CompilerCacheConfig, RegistryConfig

    none = doctor.check_compiler_cache(RegistryConfig(), tmp_path)
    assert none.ok and "builds use this machine's cache only" in none.detail
    shared = RegistryConfig(compiler_cache=CompilerCacheConfig(url="http://127.0.0.1:3142/ccache/"))

    def refuse(remote: compilercache.RemoteCache, say: object) -> None:
        raise compilercache.CompilerCacheError("refused (401)", fix="give the right ones")

    monkeypatch.setattr(compilercache, "check", refuse)
    failed = doctor.check_compiler_cache(shared, tmp_path)
    assert (
        not failed.ok and failed.detail == "refused (401)" and failed.fix == "give the right ones"
    )
    monkeypatch.setattr(compilercache, "check", lambda remote, say: say("compiler cache: down"))
    down = doctor.check_compiler_cache(shared, tmp_path)
    assert not down.ok and down.detail == "down" and "scripts/setup-host" in (down.fix or "")
    monkeypatch.setattr(compilercache, "check", lambda remote, say: remote)
    good = doctor.check_compiler_cache(shared, tmp_path)
    assert good.ok and "read-write" in good.detail

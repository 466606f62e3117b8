from __future__ import annotations

from pathlib import Path

import pytest

import dockerarch
import dockerarch.doctor
from dockerarch.errors import ConfigError

from .cli import run


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["--version"], capsys)
    assert code == 0
    assert out.strip() == f"dockerarch {dockerarch.__version__}"


def test_help_lists_commands_and_global_options(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["--help"], capsys)
    assert code == 0
    assert "doctor" in out and "--debug" in out and "--version" in out


def test_unknown_option_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["doctor", "--bogus"], capsys)
    assert code == 2
    assert "--bogus" in out + err
    assert "Traceback" not in out + err


def test_expected_error_is_one_paragraph_with_its_exit_code(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise ConfigError("registry.yaml is broken", fix="Fix it.")

    monkeypatch.setattr(dockerarch.doctor, "run_checks", broken)
    monkeypatch.delenv("DOCKERARCH_DEBUG", raising=False)
    code, _, err = run(["doctor"], capsys)
    assert code == ConfigError.exit_code == 3
    assert err.strip() == "error: registry.yaml is broken. Fix it."
    assert "Traceback" not in err


def test_debug_shows_the_traceback(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise ConfigError("registry.yaml is broken")

    monkeypatch.setattr(dockerarch.doctor, "run_checks", broken)
    code, _, err = run(["--debug", "doctor"], capsys)
    assert code == 3
    assert "Traceback (most recent call last)" in err
    assert "error: registry.yaml is broken." in err


def test_unexpected_exception_is_an_internal_error_without_traceback(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def bug(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(dockerarch.doctor, "run_checks", bug)
    monkeypatch.delenv("DOCKERARCH_DEBUG", raising=False)
    code, _, err = run(["doctor"], capsys)
    assert code == 70
    assert "internal error: ZeroDivisionError: division by zero" in err
    assert "--debug" in err
    assert "Traceback" not in err


def test_ctrl_c_exits_130(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(dockerarch.doctor, "run_checks", interrupted)
    code, _, err = run(["doctor"], capsys)
    assert code == 130
    assert "Traceback" not in err


def test_unknown_key_in_registry_yaml_is_rejected_with_its_path(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "registry.yaml"
    config.write_text("registry:\n  adress: 127.0.0.1:5000\n")
    code, _, err = run(["doctor", "--registry-config", str(config)], capsys)
    assert code == 3
    assert "Unknown key 'registry.adress'" in err
    assert "Did you mean 'address'?" in err
    assert "Traceback" not in err

from __future__ import annotations

from pathlib import Path

import pytest

import dockerarch
import dockerarch.doctor
from dockerarch.errors import ConfigError

from .cli import run


def doctor_raises(monkeypatch: pytest.MonkeyPatch, exc: Exception) -> None:
    """`dockerarch doctor` raises ``exc`` (DOCKERARCH_DEBUG unset: --debug alone asks)."""

    def broken(*args: object, **kwargs: object) -> None:
        raise exc

    monkeypatch.setattr(dockerarch.doctor, "run_checks", broken)
    monkeypatch.delenv("DOCKERARCH_DEBUG", raising=False)


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
    doctor_raises(monkeypatch, ConfigError("registry.yaml is broken", fix="Fix it."))
    code, _, err = run(["doctor"], capsys)
    assert code == ConfigError.exit_code == 3
    assert err.strip() == "error: registry.yaml is broken. Fix it."
    assert "Traceback" not in err


def test_an_error_quoting_a_build_s_lines_shows_their_escape_sequences_literally(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A failed build's error quotes its last lines, which the package's own build printed:
    # an escape sequence there must not reach the user's terminal as one.
    doctor_raises(
        monkeypatch, ConfigError("the build's last lines:\n\x1b]0;owned\x07\x1b[2Jsetup.py\r\tdone")
    )
    code, _, err = run(["doctor"], capsys)
    assert code == 3
    assert "\x1b" not in err and "\x07" not in err and "\r" not in err
    assert "\\x1b]0;owned\\x07\\x1b[2Jsetup.py" in err


def test_debug_shows_the_traceback(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    doctor_raises(monkeypatch, ConfigError("registry.yaml is broken"))
    code, _, err = run(["--debug", "doctor"], capsys)
    assert code == 3
    assert "Traceback (most recent call last)" in err
    assert "error: registry.yaml is broken." in err


def test_unexpected_exception_is_an_internal_error_without_traceback(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    doctor_raises(monkeypatch, ZeroDivisionError("division by zero"))
    code, _, err = run(["doctor"], capsys)
    assert code == 70
    assert "internal error: ZeroDivisionError: division by zero" in err
    assert "--debug" in err
    assert "Traceback" not in err


def test_unknown_key_in_registry_yaml_is_rejected_with_its_path(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "registry.yaml"
    config.write_text("registry:\n  adress: 127.0.0.1:5000\n")
    code, _, err = run(["doctor", "--registry-config", str(config)], capsys)
    said = " ".join(err.split())  # wrapped to the terminal's width wherever the path ends
    assert code == 3
    assert "Unknown key 'registry.adress'" in said
    assert "Did you mean 'address'?" in said
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["generate", "numpy", "--arch", "armv7", "-o", "{tmp}"],
         "Cannot write {tmp}: it is a directory. Name a file, e.g. {tmp}/Dockerfile."),
        (["generate", "numpy", "--arch", "armv7", "-o", "/proc/dockerarch-test/Dockerfile"],
         "Cannot write /proc/dockerarch-test/Dockerfile: the directory /proc/dockerarch-test does not exist"),
        (["build", "numpy", "--arch", "armv7", "--out", "{tmp}/file"],
         "--out {tmp}/file is a file, not a directory"),
        (["build", "numpy", "--arch", "armv7", "--out", "/proc/dockerarch-test"],
         "Cannot write into --out /proc/dockerarch-test:"),
        (["export-rootfs", "--image", "x:1", "--target", "debian-armv7", "/proc/dockerarch-test"],
         "Cannot write into DEST's directory /proc:"),
        (["upload", "wheel", "--package", "demo==1.0", "--arch", "armv7", "--out", "{tmp}",
          "--archive", "{tmp}/file"], "--archive {tmp}/file is a file, not a directory"),
    ],
)  # fmt: skip
def test_an_output_that_cannot_be_written_is_refused_before_any_work(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("")
    code, _, err = run([a.replace("{tmp}", str(tmp_path)) for a in argv], capsys)
    assert code == 73, err
    assert message.replace("{tmp}", str(tmp_path)) in " ".join(err.split())
    assert "Traceback" not in err


def test_a_wheel_build_is_announced_by_its_packages_name() -> None:
    from dockerarch.buildrun import announcement
    from dockerarch.render import plan

    wheel = plan("wheel", arch="armv7", target=None, version=None, package="msgpack==1.1.0",
                 settings={})  # fmt: skip
    assert announcement(wheel) == "building msgpack 1.1.0 for debian-armv7 (linux/arm/v7)"
    torch = plan("torch", arch=None, target="rpi3", version="2.6.0", package=None, settings={})
    assert announcement(torch).startswith("building torch 2.6.0 for rpi3 (linux/arm/v7)")


def test_progress_modes(capsys: pytest.CaptureFixture[str]) -> None:
    from dockerarch.cli.build import progress_mode

    assert [progress_mode(m) for m in ("auto", "tty", "plain")] == [None, True, False]
    code, _, err = run(["build", "qpulib", "--arch", "armv7", "--progress", "fancy"], capsys)
    assert code == 2 and "--progress fancy is not a progress mode" in err and "Traceback" not in err


def test_import_img_makes_the_base_of_one_target(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(["base", "import-img", str(tmp_path / "x.img"), "--target", "rpi3,pynq-z1"],
                       capsys)  # fmt: skip
    assert code == 2 and "Traceback" not in err
    assert "base import-img makes the base of one target, not 2 (rpi3,pynq-z1)" in " ".join(
        err.split()
    )


@pytest.mark.parametrize(
    "option",
    [["--build-constraint", "b.txt"], ["-c", "c.txt"], ["--no-deps"], ["--name", "x"],
     ["--no-binary", "numpy"]],
)  # fmt: skip
def test_set_options_without_a_set_are_refused(
    option: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(["build", "numpy", "--arch", "armv7", *option], capsys)
    assert code == 2 and "go with a wheel set" in " ".join(err.split()), err
    assert "Traceback" not in err


def test_a_recipe_build_with_credentials_in_pip_s_configuration_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recipe's build fetches inside the engine, where the code it builds could read an
    index's credentials: refused, naming the index without them, before the engine is asked."""
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = https://ci:t0ken@corp.example.invalid/simple/\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    code, out, err = run(["build", "numpy", "--arch", "armv7", "--out", str(tmp_path)], capsys)
    flat = " ".join(err.split())
    assert code == 2 and "Traceback" not in err, err
    assert (
        f"pip's configuration ({conf}) gives the index https://corp.example.invalid/simple/ with credentials"
        in flat
    )
    assert "t0ken" not in err + out


def test_ctrl_c_stops_what_dockerarch_started_and_exits_130(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """typer turns Ctrl-C into its own exit 130: main must still see it and stop buildx (a
    buildx left running hands its cancelled steps to the next run)."""
    import threading

    from dockerarch import process

    def ctrl_c(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    stopped: list[bool] = []

    def interrupt_children(say: object) -> list[int]:
        stopped.append(True)
        return [4242]

    monkeypatch.setattr(dockerarch.doctor, "run_checks", ctrl_c)
    monkeypatch.setattr(process, "interrupt_children", interrupt_children)
    monkeypatch.setattr(process, "_interrupted", threading.Event())
    code, _, err = run(["doctor"], capsys)
    assert code == 130
    assert stopped == [True]
    assert "Interrupted. Stopped what it had started." in err
    assert "Traceback" not in err


def test_an_exit_not_caused_by_ctrl_c_stops_nothing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from dockerarch import process

    monkeypatch.setattr(process, "interrupt_children", lambda say: pytest.fail("stopped"))
    code, _, err = run(["doctor", "--bogus"], capsys)
    assert code == 2
    assert "Interrupted" not in err


def test_a_python_without_tarfile_filters_is_refused_before_any_work(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every sdist is unpacked with tarfile's data filter (PEP 706): a Python that lacks it
    (3.11.0-3.11.3 unpatched) would fail mid-build with a TypeError; it is refused first."""
    import tarfile

    monkeypatch.delattr(tarfile, "data_filter")
    code, _, err = run(["targets"], capsys)
    assert code != 0 and "no tarfile extraction filters (PEP 706)" in err
    assert "Traceback" not in err


def test_a_set_for_a_board_is_found_by_its_files_and_checked_before_the_engine(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import json

    req = tmp_path / "board.txt"
    req.write_text("zstandard==0.23.0\n")
    key = tmp_path / "id.pub"
    key.write_text(
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBv3c8Z1mJpJ3T8d5l4QmKq9pQ2l0yE0Yx7Yv1b2c3d4\n"
    )
    out = tmp_path / "dist"
    card = ["export-img", "wheel", "-r", str(req), "--arch", "armv7", "--out", str(out),
            "--ssh-key", str(key), str(tmp_path / "pi.img")]  # fmt: skip
    for argv, words in (
        (card, f"There is no set board for debian-armv7 in {out} "),
        ([card[0], *card[2:], "--image", "x:1"], "-r and --image each say what the userland is"),
        ([*card[:2], *card[4:], "--name", "board"], "--name names a set, and no -r was given"),
    ):
        code, _, err = run(argv, capsys)
        assert code == 2 and words in " ".join(err.split()), (argv, err)
        assert "Traceback" not in err
    # a set made before this dockerarch recorded its image, or from other requirements
    where = out / "debian-armv7" / "sets" / "board"
    where.mkdir(parents=True)
    (where / "manifest.json").write_text(json.dumps({"requirements": ["zstandard==0.23.0 (x:1)"]}))
    code, _, err = run(card, capsys)
    assert code == 2 and "records no image it was installed into" in " ".join(err.split()), err
    req.write_text("zstandard==0.22.0\n")
    code, _, err = run(card, capsys)
    assert code == 2 and "was built from other requirements" in " ".join(err.split()), err
    assert "+zstandard==0.22.0" in err and not (tmp_path / "pi.img").exists()

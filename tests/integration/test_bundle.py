"""dockerarch bundle without Glow (CI cannot fetch it): bundle-shaped objects the tests make with
Debian's clang for Cortex-M (Glow's bundle API, the same arithmetic as the ONNX models they make),
checked against the MCU, linked with the firmware kit and arm-none-eabi-gcc/newlib, and run on
QEMU's mps2-an500 (Cortex-M7) and mps2-an386 (Cortex-M4) against onnxruntime's outputs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from tests.integration import mcu_models as models
from tests.integration.conftest import dockerarch


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bundles")
    for net in (models.mlp(), models.cnn()):
        models.onnx_model(net, root / f"{net.name}.onnx")
        models.fake_bundle(net, root / f"{net.name}-m7")
    models.fake_bundle(models.cnn(), root / "cnn-m4", cpu="cortex-m4")
    return root


def _ok(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("net", ["mlp", "cnn"])
def test_the_bundle_runs_on_an_emulated_cortex_m7_and_computes_what_onnxruntime_does(
    made: Path, net: str
) -> None:
    bundle = made / f"{net}-m7"
    result = dockerarch("bundle", "check", str(bundle), "--mcu", "cortex-m7",
                        "--model", str(made / f"{net}.onnx"))  # fmt: skip
    _ok(result)
    assert "proved on QEMU's mps2-an500" in " ".join(result.stderr.split())
    manifest = json.loads((bundle / "manifest.json").read_text())
    proof = manifest["proof"]
    assert proof["emulator"] == "mps2-an500"
    assert proof["outputs_compared"] == {"output": 10}
    assert 0 <= proof["max_abs_error"]["output"] <= 1e-4
    assert manifest["checks"]["float_abi"].startswith("hard")
    assert {"expf", "memcpy", "__assert_fail"} <= set(manifest["checks"]["undefined_symbols"])
    # The firmware the user starts from: a Cortex-M executable that links the bundle.
    with open(bundle / "firmware" / "firmware.elf", "rb") as handle:
        elf = ELFFile(handle)
        assert (elf["e_machine"], elf["e_type"]) == ("EM_ARM", "ET_EXEC")
        assert elf.get_section_by_name(".symtab").get_symbol_by_name("net")
    # `make run`, as the kit's Makefile says, prints the same outputs.
    run = subprocess.run(["make", "-s", "-C", str(bundle / "firmware"), "run"],
                         capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert run.stdout.count("dockerarch-out 0 ") == 10 and "dockerarch-done" in run.stdout


def test_a_cortex_m4_bundle_runs_on_the_emulated_m4_and_an_m7_one_is_refused_there(
    made: Path,
) -> None:
    _ok(dockerarch("bundle", "check", str(made / "cnn-m4"), "--mcu", "cortex-m4",
                   "--model", str(made / "cnn.onnx")))  # fmt: skip
    assert json.loads((made / "cnn-m4" / "manifest.json").read_text())["proof"]["emulator"] == (
        "mps2-an386"
    )
    refused = dockerarch("bundle", "check", str(made / "cnn-m7"), "--mcu", "cortex-m4")
    assert refused.returncode == 7
    said = " ".join(refused.stderr.split())  # wrapped to the terminal: a path's length moves it
    assert "floating-point architecture 8" in said and "up to 6" in said, refused.stderr


def test_a_bundle_that_computes_something_else_is_caught_before_flashing(
    made: Path, tmp_path: Path
) -> None:
    other = models.fake_bundle(models.mlp(seed=7), tmp_path / "other")  # other weights
    result = dockerarch("bundle", "check", str(other), "--mcu", "cortex-m7",
                        "--model", str(made / "mlp.onnx"))  # fmt: skip
    assert result.returncode == 7, result.stderr
    said = " ".join(result.stderr.split())
    assert "differs from onnxruntime's" in said and "do not flash it" in said, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("soft-float", "soft-float ABI"),
        ("x86", "not an ARM relocatable object"),
        ("armv7-a", "not ARMv7E-M"),
        ("glibc-only", "__isoc99_sscanf"),
        ("too-big", "does not fit cortex-m7's RAM: it needs"),
    ],
)
def test_objects_that_would_not_run_on_the_mcu_are_refused_naming_why(
    tmp_path: Path, kind: str, message: str
) -> None:
    net = models.mlp()
    if kind == "soft-float":
        models.fake_bundle(net, tmp_path, float_abi="soft")
    elif kind == "x86":
        models.fake_bundle(net, tmp_path, clang_args=("--target=x86_64-linux-gnu",))
    elif kind == "armv7-a":
        models.fake_bundle(
            net, tmp_path, clang_args=("--target=armv7a-none-eabihf", "-mcpu=cortex-a9")
        )
    elif kind == "glibc-only":
        models.fake_bundle(net, tmp_path, extra_c=(
            "extern int __isoc99_sscanf(const char *, const char *, ...);\n"
            "int parse(const char *s) { int v = 0; __isoc99_sscanf(s, \"%d\", &v); return v; }\n"))  # fmt: skip
    else:
        models.fake_bundle(net, tmp_path)
    extra = ["--ram", "16K"] if kind == "too-big" else []
    result = dockerarch("bundle", "check", str(tmp_path), "--mcu", "cortex-m7", *extra)
    assert result.returncode == 7, result.stdout + result.stderr
    assert message in " ".join(result.stderr.split()), result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "manifest.json").exists()
    if kind == "too-big":  # both sizes named
        assert "the MCU has 16.00 KiB (16384 bytes)" in " ".join(result.stderr.split())


@pytest.mark.parametrize(
    ("opset", "extra_op", "message"),
    [(14, None, "opset 14; Glow's importer handles opset 13 and lower"),
     (13, "Softsign", "the operator(s) Softsign, which Glow's ONNX importer cannot import")],
)  # fmt: skip
def test_models_glow_cannot_import_are_user_errors_before_anything_runs(
    tmp_path: Path, opset: int, extra_op: str | None, message: str
) -> None:
    model = models.onnx_model(models.mlp(), tmp_path / "m.onnx", opset=opset, extra_op=extra_op)
    result = dockerarch(
        "bundle", "make", str(model), "--mcu", "cortex-m7", "--out", str(tmp_path / "b")
    )
    assert result.returncode == 2, result.stderr
    assert message in " ".join(result.stderr.split())
    assert not (tmp_path / "b").exists()


def test_bundle_make_without_glows_image_says_how_to_build_it(tmp_path: Path) -> None:
    model = models.onnx_model(models.mlp(), tmp_path / "m.onnx")
    result = dockerarch("bundle", "make", str(model), "--image", "dockerarch/glow:absent-debian-amd64",
                        "--out", str(tmp_path / "b"))  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "dockerarch build glow --arch amd64 --source" in " ".join(result.stderr.split())
    assert not (tmp_path / "b").exists() and not list(tmp_path.glob(".b.*"))
    # A registry reference is pulled (a colleague's push): one the registry lacks is said so.
    remote = "127.0.0.1:5000/dockerarch-test/glow:absent"
    result = dockerarch(
        "bundle", "make", str(model), "--image", remote, "--out", str(tmp_path / "b")
    )
    assert result.returncode == 2, result.stderr
    assert f"The registry has no {remote}" in " ".join(result.stderr.split())


def test_a_firmware_directory_the_user_changed_is_never_overwritten(
    made: Path, tmp_path: Path
) -> None:
    bundle = models.fake_bundle(models.mlp(), tmp_path / "mine")
    (bundle / "firmware").mkdir()
    (bundle / "firmware" / "main.c").write_text("/* my firmware */\n")
    _ok(dockerarch("bundle", "check", str(bundle), "--model", str(made / "mlp.onnx")))
    assert (bundle / "firmware" / "main.c").read_text() == "/* my firmware */\n"
    assert (bundle / "firmware.dockerarch" / "firmware.elf").is_file()


def test_doctor_says_the_bundle_tools_are_there() -> None:
    doctor = dockerarch("doctor", "--json")
    (row,) = [c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "bundle tools"]
    assert row["ok"] and not row["required"], row
    assert "arm-none-eabi-gcc 12" in row["detail"] and "with newlib" in row["detail"], row

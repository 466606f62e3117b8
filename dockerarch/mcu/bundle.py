"""``dockerarch bundle``: make a Glow bundle for a Cortex-M, check it, prove it on QEMU.

``make`` runs model-compiler into a fresh directory beside OUT, ``check``s what it wrote (and with
the model, proves it), writes manifest.json and only then puts the directory at OUT: a bundle
that fails a check never replaces a good one.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dockerarch import __version__, files, process
from dockerarch.artifacts import VerificationError
from dockerarch.errors import UsageError
from dockerarch.mcu import header as header_module
from dockerarch.mcu import kit, objcheck, reference
from dockerarch.mcu.profiles import Mcu, size_text

# libjit computes with fast math (reassociation, approximate exp): outputs match onnxruntime's
# to |got - want| <= ATOL + RTOL * |want|.
ATOL = 1e-4
RTOL = 1e-3
NETWORK_NAME = re.compile(r"[a-z_][a-z0-9_]{0,63}")


@dataclass(frozen=True)
class Bundle:
    directory: Path
    header: header_module.BundleHeader
    object_name: str
    header_name: str
    weights_bin: str | None
    weights_txt: str | None


def find(directory: Path) -> Bundle:
    """The bundle model-compiler wrote in ``directory``: one header declaring one network, its
    object and weights beside it."""
    headers = sorted(p for p in directory.glob("*.h") if p.is_file()) if directory.is_dir() else []
    if len(headers) != 1:
        raise UsageError(
            f"{directory} holds {len(headers)} headers (*.h), not one Glow bundle",
            fix="Give the directory model-compiler wrote for one network (-emit-bundle).",
        )
    parsed = header_module.parse(objcheck.read(headers[0]).decode("utf-8", "replace"),
                                 where=str(headers[0]))  # fmt: skip
    stem = headers[0].stem
    obj = directory / f"{stem}.o"
    if not obj.is_file():
        raise UsageError(f"{directory} has the header {headers[0].name} but no {obj.name}",
                         fix="Copy the whole bundle directory model-compiler wrote.")  # fmt: skip
    weights_bin, weights_txt = (directory / f"{stem}.weights.{ext}" for ext in ("bin", "txt"))
    return Bundle(directory, parsed, obj.name, headers[0].name,
                  weights_bin.name if weights_bin.is_file() else None,
                  weights_txt.name if weights_txt.is_file() else None)  # fmt: skip


def newlib_archives(mcu: Mcu) -> list[bytes]:
    """newlib's C and maths libraries and libgcc for the MCU's multilib, as Debian's
    arm-none-eabi-gcc links them (their contents)."""
    return [path.read_bytes() for path in newlib_paths(mcu)]


def newlib_paths(mcu: Mcu) -> list[Path]:
    """Where arm-none-eabi-gcc takes newlib's libc (nano), libm and libgcc for the MCU's
    multilib; a UsageError when newlib is not installed."""
    found = []
    for query in ("-print-file-name=libc_nano.a", "-print-file-name=libm.a",
                  "-print-libgcc-file-name"):  # fmt: skip
        path = Path(process.run(["arm-none-eabi-gcc", *mcu.gcc_flags, query],
                                hint=kit.TOOLS_HINT).stdout.strip())  # fmt: skip
        if not path.is_absolute() or not path.is_file():
            raise UsageError(
                f"arm-none-eabi-gcc has no {query.split('=')[-1]} for {mcu.cpu}",
                fix="Install libnewlib-arm-none-eabi (scripts/setup-host does).",
            )
        found.append(path)
    return found


def check(bundle: Bundle, mcu: Mcu) -> dict[str, Any]:
    """The object's checks; returns the manifest's ``checks`` and ``sizes``."""
    where = str(bundle.directory / bundle.object_name)
    facts = objcheck.read_object(objcheck.read(bundle.directory / bundle.object_name), where)
    objcheck.check_code(facts, mcu, bundle.header.entry, where)
    objcheck.check_symbols(objcheck.unresolved(facts.undefined, newlib_archives(mcu)), where)
    if bundle.weights_bin is not None:
        size = (bundle.directory / bundle.weights_bin).stat().st_size
        if size != bundle.header.constant_size:
            raise VerificationError(
                f"{bundle.weights_bin} holds {size} bytes; the header's constant weights are "
                f"{bundle.header.constant_size}",
                fix="The weights and the header come from different runs: make the bundle again.",
            )
    elif bundle.header.constant_size:
        raise UsageError(f"{bundle.directory} has no {bundle.header.entry}.weights.bin",
                         fix="Copy the whole bundle directory model-compiler wrote.")  # fmt: skip
    report = objcheck.fit(facts, bundle.header, mcu)
    objcheck.check_fit(report, mcu)
    return {
        "checks": {
            "elf": "ELF32 ARM relocatable object",
            "cpu_arch": "v7E-M (M profile), Thumb only",
            "fp_arch": facts.attributes.get("TAG_FP_ARCH"),
            "float_abi": "hard (VFP registers)",
            "undefined_symbols": sorted(facts.undefined),
            "undefined_resolved_by": "newlib (nano), libm, libgcc, the kit's shims",
        },
        "sizes": {
            **{k.replace(" ", "_"): v for k, v in report.parts.items()},
            "flash_needed": report.flash_needed,
            "flash": report.flash,
            "ram_needed": report.ram_needed,
            "ram": report.ram,
        },
    }


def prove(bundle: Bundle, mcu: Mcu, model_path: Path, *, atol: float = ATOL,
          rtol: float = RTOL, say: Callable[[str], None] = lambda _: None) -> dict[str, Any]:  # fmt: skip
    """The bundle linked with the kit, run on QEMU's board for the MCU's core on the fixed input,
    its outputs compared with onnxruntime's for the model."""
    model = reference.load(model_path)
    placeholders = {}
    for tensor in (*model.inputs, *model.outputs):
        found = bundle.header.placeholder(reference.legal_name(tensor.name))
        if found is None:
            raise VerificationError(
                f"The bundle has no placeholder for the model's '{tensor.name}' (its header "
                f"names {', '.join(p.name for p in bundle.header.placeholders) or 'none'})",
                fix="Give the model the bundle was made from.",
            )
        elements = math.prod(tensor.dims)
        if found.elements != elements or found.kind != "float":
            raise VerificationError(
                f"The bundle's '{found.name}' is {found.kind} x {found.elements}; the model's "
                f"'{tensor.name}' is float32 x {elements}",
                fix="Give the model the bundle was made from.",
            )
        placeholders[tensor.name] = found
    inputs = reference.fixed_inputs(model)
    say(f"reference: onnxruntime runs {model_path.name} on the fixed input")
    expected = reference.run(model, inputs)
    firmware_dir = _firmware_dir(bundle.directory, say)
    outputs = [placeholders[t.name] for t in model.outputs]
    kit.write(firmware_dir, mcu, bundle.header,
              {"object": bundle.object_name, "header": bundle.header_name,
               "weights_txt": f"../{bundle.weights_txt}" if bundle.weights_txt else ""},
              {placeholders[name].name: list(values.reshape(-1)) for name, values in inputs.items()},
              outputs)  # fmt: skip
    say(f"firmware: linking with arm-none-eabi-gcc and newlib for {mcu.cpu}")
    firmware = kit.link(firmware_dir)
    say(f"QEMU: running the inference on {mcu.qemu} ({mcu.cpu})")
    ran = kit.run(mcu, firmware, outputs)
    worst: dict[str, float] = {}
    for tensor in model.outputs:
        want = [float(v) for v in expected[tensor.name].reshape(-1)]
        got = ran.outputs[placeholders[tensor.name].name]
        errors = [abs(g - w) for g, w in zip(got, want, strict=True)]
        bad = [i for i, (g, w) in enumerate(zip(got, want, strict=True))
               if not (abs(g - w) <= atol + rtol * abs(w))]  # fmt: skip
        if bad:
            i = bad[0]
            raise VerificationError(
                f"On QEMU's {mcu.qemu} the bundle's '{tensor.name}' differs from onnxruntime's in "
                f"{len(bad)} of {len(want)} values (element {i}: {got[i]!r} against {want[i]!r}; "
                f"allowed {atol:g} + {rtol:g} x |value|)",
                fix="The bundle does not compute what the model does: report it with the model "
                f"and {firmware_dir}; do not flash it.",
            )
        worst[tensor.name] = max(errors, default=0.0)
    return {"emulator": mcu.qemu, "seconds": round(ran.seconds, 2), "input_seed": reference.SEED,
            "tolerance": {"atol": atol, "rtol": rtol}, "max_abs_error": worst,
            "outputs_compared": {t.name: math.prod(t.dims) for t in model.outputs},
            "model_sha256": model.sha256, "opset": model.opset}  # fmt: skip


def _firmware_dir(directory: Path, say: Callable[[str], None]) -> Path:
    """Where the proof's kit goes: ``firmware/``, unless that holds a kit of the user's own (no
    kit.MARKER: never overwritten), then ``firmware.dockerarch/``."""
    chosen = directory / "firmware"
    if chosen.exists() and not (chosen / kit.MARKER).exists():
        chosen = directory / "firmware.dockerarch"
        say(f"{directory / 'firmware'} is your own: the proof's kit goes to {chosen}")
    return chosen


def write_manifest(bundle: Bundle, mcu: Mcu, found: dict[str, Any], extra: dict[str, Any]) -> None:
    header = bundle.header
    manifest = {
        "dockerarch": __version__,
        "network": header.entry,
        "mcu": {"name": mcu.name, "cpu": mcu.cpu, "fpu": mcu.fpu, "float_abi": "hard"},
        "files": {
            name: files.sha256_file(bundle.directory / name)
            for name in (
                bundle.object_name,
                bundle.header_name,
                bundle.weights_bin,
                bundle.weights_txt,
            )
            if name
        },
        "memory": {
            "constant": header.constant_size,
            "mutable": header.mutable_size,
            "activations": header.activations_size,
            "alignment": header.alignment,
        },
        "placeholders": [
            {
                "name": p.name,
                "type": p.kind,
                "dims": list(p.dims),
                "offset": p.offset,
                "bytes": p.size,
            }
            for p in header.placeholders
        ],
        **found,
        **extra,
    }
    files.write_atomic(bundle.directory / "manifest.json",
                       (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())  # fmt: skip


def summary(found: dict[str, Any], mcu: Mcu) -> str:
    s = found["sizes"]
    return (f"fits {mcu.name}: flash {size_text(s['flash_needed'])} of {size_text(s['flash'])}, "
            f"RAM {size_text(s['ram_needed'])} of {size_text(s['ram'])}")  # fmt: skip


def make(model: Path, mcu: Mcu, out: Path, *, image: str, network: str, prove_it: bool,
         say: Callable[[str], None]) -> dict[str, Any]:  # fmt: skip
    """model-compiler, the checks and (``prove_it``) the proof in a work directory beside
    ``out``, which replaces ``out`` only when all passed."""
    from dockerarch.mcu import compiler

    if not NETWORK_NAME.fullmatch(network):
        raise UsageError(f"--name {network!r} is not a C identifier in lower case",
                         fix="Give a name like net or person_detect (letters, digits, _).")  # fmt: skip
    loaded = reference.load(model)  # its opset and operators, before a container starts
    out = out.absolute()
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        say(f"model-compiler: {model.name} (opset {loaded.opset}, {len(loaded.operators)} "
            f"operators) for {mcu.cpu}, hard float")  # fmt: skip
        compiler.compile_bundle(compiler.local_image(image, say), model, mcu, network, work)
        bundle = find(work)
        found = check(bundle, mcu)
        say(summary(found, mcu))
        extra: dict[str, Any] = {"model": {"file": model.name, "sha256": loaded.sha256,
                                           "opset": loaded.opset,
                                           "operators": list(loaded.operators)},
                                 "glow_image": image}  # fmt: skip
        if prove_it:
            extra["proof"] = prove(bundle, mcu, model, say=say)
        write_manifest(bundle, mcu, found, extra)
        files.replace_dir(work, out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return found | extra

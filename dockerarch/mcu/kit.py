"""The firmware kit: a bundle linked into a Cortex-M program with Debian's arm-none-eabi-gcc and
newlib, and run on QEMU's board of the same core with semihosting for its output.

``write`` puts the kit (startup code, the linker script for the QEMU board, the shims libjit
needs, a Makefile) and a ``main.c`` made for the bundle (its buffers, the fixed input, the
outputs printed as exact float bits) in a directory users can start their own firmware from.
"""

from __future__ import annotations

import re
import struct
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dockerarch import process
from dockerarch.errors import CommandFailedError, UsageError
from dockerarch.mcu.header import BundleHeader, Placeholder
from dockerarch.mcu.profiles import Mcu
from dockerarch.paths import data_path

KIT_FILES = ("startup.c", "glow_shims.c")
# In a kit directory dockerarch wrote (and may write again): delete it to make the kit yours.
MARKER = ".dockerarch-kit"
TOOLS_HINT = ("Install Debian's gcc-arm-none-eabi, libnewlib-arm-none-eabi and qemu-system-arm "
              "(scripts/setup-host does).")  # fmt: skip
_OUT = re.compile(r"^dockerarch-out (\d+) (\d+) ([0-9a-f]{8})$", re.MULTILINE)
_DONE = "dockerarch-done"


@dataclass(frozen=True)
class Run:
    outputs: dict[str, list[float]]
    seconds: float
    console: str


def linker_script(mcu: Mcu) -> str:
    text = data_path("mcu-kit", "link.ld.in").read_text()
    values = {"MACHINE": f"QEMU's {mcu.qemu} ({mcu.cpu})",
              "FLASH_ORIGIN": f"0x{mcu.qemu_flash.origin:08x}",
              "FLASH_LENGTH": f"0x{mcu.qemu_flash.length:x}",
              "RAM_ORIGIN": f"0x{mcu.qemu_ram.origin:08x}",
              "RAM_LENGTH": f"0x{mcu.qemu_ram.length:x}"}  # fmt: skip
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    return text


def _words(values: Sequence[float]) -> str:
    words = [f"0x{struct.unpack('<I', struct.pack('<f', float(v)))[0]:08x}u" for v in values]
    return ",\n".join("    " + ", ".join(words[i : i + 8]) for i in range(0, len(words), 8))


def main_c(header: BundleHeader, header_name: str, weights_txt: str,
           inputs: Mapping[str, Sequence[float]], outputs: Sequence[Placeholder]) -> str:  # fmt: skip
    """The program: the bundle's three buffers (the constant weights in flash), each input copied
    to its placeholder, one inference, each output's floats printed as their bits."""
    align = max(header.alignment, 4)
    lines = [
        f"/* Made by dockerarch for the bundle {header.entry}: its buffers, a fixed input, one",
        " * inference, the outputs printed (float bits in hex) through semihosting. */",
        "#include <stdint.h>", "#include <stdio.h>", "#include <string.h>",
        f'#include "{header_name}"', "",
    ]  # fmt: skip
    if header.constant_size:
        lines += [f"static const uint8_t constantWeight[{header.constant_size}] "
                  f"__attribute__((aligned({align}))) = {{", f'#include "{weights_txt}"', "};"]  # fmt: skip
    lines += [
        f"static uint8_t mutableWeight[{max(header.mutable_size, 1)}] __attribute__((aligned({align})));",
        f"static uint8_t activations[{max(header.activations_size, 1)}] __attribute__((aligned({align})));",
        "",
    ]  # fmt: skip
    for index, (name, values) in enumerate(inputs.items()):
        lines += [f"/* {name} */", f"static const uint32_t input{index}[{len(values)}] = {{",
                  _words(values), "};"]  # fmt: skip
    lines += ["", "int main(void) {"]
    for index, name in enumerate(inputs):
        placeholder = header.placeholder(name)
        assert placeholder is not None
        lines.append(f"    memcpy(mutableWeight + {placeholder.offset}, input{index}, "
                     f"sizeof input{index});")  # fmt: skip
    constant = "(uint8_t *)constantWeight" if header.constant_size else "(uint8_t *)0"
    lines += [f"    int status = {header.entry}({constant}, mutableWeight, activations);",
              '    if (status != 0) { printf("dockerarch-error %d\\n", status); return 2; }']  # fmt: skip
    for index, placeholder in enumerate(outputs):
        lines += [
            f"    for (unsigned i = 0; i < {placeholder.elements}u; i++) {{",
            "        uint32_t bits;",
            f"        memcpy(&bits, mutableWeight + {placeholder.offset} + 4 * i, 4);",
            f'        printf("dockerarch-out {index} %u %08lx\\n", i, (unsigned long)bits);',
            "    }",
        ]
    lines += [f'    printf("{_DONE}\\n");', "    return 0;", "}", ""]
    return "\n".join(lines)


def makefile(mcu: Mcu, bundle_object: str) -> str:
    flags = " ".join(mcu.gcc_flags)
    return f"""# Made by dockerarch: the bundle linked into firmware for {mcu.name} ({mcu.cpu}), and run on
# QEMU's {mcu.qemu}. `make` builds firmware.elf; `make run` runs it (semihosting prints the outputs).
CC = arm-none-eabi-gcc
MCU = {flags}
CFLAGS = $(MCU) -O2 -ffunction-sections -fdata-sections -I..
LDFLAGS = $(MCU) -nostartfiles --specs=nano.specs --specs=rdimon.specs -T link.ld \\
          -Wl,--gc-sections -Wl,-Map=firmware.map
QEMU = qemu-system-arm -M {mcu.qemu} -nographic -monitor null -serial null \\
       -semihosting-config enable=on,target=native

firmware.elf: startup.c glow_shims.c main.c link.ld ../{bundle_object}
\t$(CC) $(CFLAGS) $(LDFLAGS) -o $@ startup.c glow_shims.c main.c ../{bundle_object} -lm

run: firmware.elf
\t$(QEMU) -kernel firmware.elf

.PHONY: run
"""


def write(directory: Path, mcu: Mcu, header: BundleHeader, files: Mapping[str, str],
          inputs: Mapping[str, Sequence[float]], outputs: Sequence[Placeholder]) -> None:  # fmt: skip
    """The kit in ``directory`` (beside the bundle's files: ``files`` names its object, header and
    weights text)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in KIT_FILES:
        (directory / name).write_text(data_path("mcu-kit", name).read_text())
    (directory / "link.ld").write_text(linker_script(mcu))
    (directory / "main.c").write_text(
        main_c(header, files["header"], files["weights_txt"], inputs, outputs)
    )
    (directory / "Makefile").write_text(makefile(mcu, files["object"]))
    (directory / MARKER).write_text(
        "dockerarch writes this kit again on each proof; delete this file to keep your changes.\n"
    )


def link(directory: Path) -> Path:
    try:
        process.run(["make", "-s", "-C", str(directory), "firmware.elf"], hint=TOOLS_HINT)
    except CommandFailedError as exc:
        undefined = sorted(set(re.findall(r"undefined reference to `([^']+)'", exc.output)))
        raise UsageError(
            "The firmware did not link"
            + (f": nothing defines {', '.join(undefined)}" if undefined else f": {exc.problem}"),
            fix=f"See {directory / 'Makefile'} (make -C {directory}); the bundle's checks should "
            "have named what is missing, so this is worth a report.",
        ) from None
    return directory / "firmware.elf"


def run(mcu: Mcu, firmware: Path, outputs: Sequence[Placeholder], timeout: float = 600) -> Run:
    """The firmware on QEMU's board: the outputs it prints, and the run's wall time."""
    started = time.monotonic()
    done = process.run(
        ["qemu-system-arm", "-M", mcu.qemu, "-nographic", "-monitor", "null", "-serial", "null",
         "-semihosting-config", "enable=on,target=native", "-kernel", str(firmware)],
        check=False, timeout=timeout, hint=TOOLS_HINT,
    )  # fmt: skip
    seconds = time.monotonic() - started
    console = done.stdout + done.stderr
    if _DONE not in console:
        last = console.strip().splitlines()[-3:]
        raise UsageError(
            f"The firmware did not finish its inference on QEMU's {mcu.qemu} (exit status "
            f"{done.returncode}){': ' + ' / '.join(last) if last else ''}",
            fix=f"Run it yourself to see more: make -C {firmware.parent} run.",
        )
    values: dict[int, dict[int, float]] = {}
    for index, element, bits in _OUT.findall(console):
        value = struct.unpack("<f", int(bits, 16).to_bytes(4, "little"))[0]
        values.setdefault(int(index), {})[int(element)] = value
    result = {}
    for index, placeholder in enumerate(outputs):
        got = values.get(index, {})
        result[placeholder.name] = [got.get(i, float("nan")) for i in range(placeholder.elements)]
    return Run(result, seconds, console)

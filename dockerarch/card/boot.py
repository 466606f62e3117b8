"""A card's proof that it boots: the image itself as the SD card of an emulated board
(qemu-system, TCG), through a qcow2 overlay so that the image's bytes never change, the kernel,
device tree and initramfs read out of the card's own boot partition (QEMU does not run the Pi's
GPU firmware, which would read them from there), the card's own cmdline.txt with QEMU's serial
console. The serial console is then driven as a person would: log in, run commands, power off.

Powering off does not end QEMU on the raspi machines ("System halted"): the kernel's last words
are awaited, then QEMU is stopped.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from dockerarch import process
from dockerarch.card.boards import Board, Qemu
from dockerarch.errors import DockerarchError, UsageError

Say = Callable[[str], None]
T = TypeVar("T")
PROMPT = "dockerarch-prompt# "  # the shell's prompt while commands run
# the shell's terminal codes (bracketed paste), and systemd's colours cut short by "…"
ESCAPES = re.compile(r"\x1b\[[0-9;?]*(?:[A-Za-z]|(?=…))")
# what the kernel prints on the console (a soft lockup under TCG) while a command runs
KERNEL_LINES = re.compile(r"^\[ *\d+\.\d{6}\] .*\n?", re.MULTILINE)
HALTED = re.compile(r"reboot: (Power down|System halted)|System halted")
EMERGENCY = r"You are in emergency mode"  # systemd gave up booting (a device, a mount)
NO_ROOT = r"ALERT!  (.*) does not exist\.  Dropping to a shell"  # the initramfs found no root
# The emulator, not the card: under TCG a vCPU can go unscheduled for 15-25 s (the kernel then
# reports RCU stalls), longer than the 10 s software timer of the Pi's SD host driver
# (drivers/mmc/host/bcm2835.c), which fires, and its DMA completion racing that timeout
# dereferences NULL (seen: Debian's 6.1 armmp kernel under -M raspi2b, 1 boot in ~6 in the
# suite). The SD card is gone for the rest of that boot (its boot partition never appears:
# emergency mode after the device timeout). A real board's SD host has no such stalls.
EMULATOR_FAULT = r"sdhost-bcm2835 \S+: timeout waiting for hardware interrupt"
# The other face of those stalls, without the driver's message: the board stops mid-boot and says
# nothing more (seen on -M raspi3b: the root grown 210 s late, then silence until the timeout).
# A first boot's longest quiet stretch under TCG is about a minute (armv7 making its RSA host
# key); three times that is a board that stopped, not one that is busy.
SILENT = 180.0
# A boot the emulator broke is tried again from a fresh overlay, up to three boots in all: the
# faults come early (60-75 s into an armv7 boot) and, right after BuildKit dropped gigabytes of
# card records, two armv7 boots in a row were broken (session 42).
ATTEMPTS = 3
# QEMU's generic machine, for any card whose kernel runs on it (Debian's arm64 and armmp do; the
# card's initramfs loads virtio_pci and virtio_blk): 2 CPUs, a virtio disk, room for a builder.
VIRT = {
    "aarch64": Qemu(system="qemu-system-aarch64", machine="virt", memory="2G", console="ttyAMA0",
                    cpu="cortex-a72", smp=2, disk="virtio"),
    # highmem=off: Debian's armmp kernel (no LPAE) cannot reach the PCIe ECAM above 4 GiB
    "armv7": Qemu(system="qemu-system-arm", machine="virt,highmem=off", memory="1G", console="ttyAMA0",
                  cpu="cortex-a15", smp=2, disk="virtio"),
}  # fmt: skip


class BootError(DockerarchError):
    """The card did not boot, or did not do what it was asked on its console."""

    exit_code = 13


class EmulatorFault(BootError):
    """The emulated board failed the card (EMULATOR_FAULT, or SILENT seconds of silence), not
    the card itself."""


class ConsoleLog:
    """pexpect's logfile_read: the serial console written to a file as it arrives, and when the
    board last said anything."""

    def __init__(self, path: Path) -> None:
        self.file = path.open("w", buffering=1)
        self.last = time.monotonic()

    def write(self, text: str) -> None:
        self.file.write(text)
        self.last = time.monotonic()

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        self.file.close()


@dataclass
class Booted:
    seconds_to_login: float = 0.0
    seconds_to_poweroff: float = 0.0
    outputs: dict[str, str] = field(default_factory=dict)  # command -> what it printed
    console: str = ""  # everything the serial console said
    emulator_faults: list[str] = field(default_factory=list)  # boots the emulator broke, retried


def _mtools_offset(card: Path, manifest: dict[str, Any]) -> str:
    (boot,) = [p for p in manifest["partitions"] if p["number"] == 1]
    return f"{card}@@{int(boot['start_mib']) * 2**20}"


def read_boot_file(card: Path, manifest: dict[str, Any], name: str, dest: Path) -> Path:
    """One file of the card's FAT boot partition, read with mtools (nothing mounted)."""
    done = process.run(["mcopy", "-n", "-i", _mtools_offset(card, manifest), f"::{name}", str(dest)],
                       timeout=120, check=False)  # fmt: skip
    if done.returncode != 0:
        raise BootError(f"The card's boot partition has no {name}: {done.stderr.strip()}")
    return dest


def boot_files(card: Path, manifest: dict[str, Any], qemu: Qemu, board: Board,
               work: Path) -> tuple[Path, Path | None, Path, str]:  # fmt: skip
    """(kernel, device tree, initramfs, kernel command line) as the card's firmware would take
    them: config.txt's kernel= and initramfs lines, cmdline.txt. No device tree for QEMU's virt
    machine, which makes its own."""
    config = read_boot_file(card, manifest, "config.txt", work / "config.txt").read_text()
    kernel = re.search(r"^kernel=(\S+)", config, re.M)
    initramfs = re.search(r"^initramfs (\S+)", config, re.M)
    if not kernel or not initramfs:
        raise BootError("The card's config.txt names no kernel= or initramfs")
    cmdline = (
        read_boot_file(card, manifest, "cmdline.txt", work / "cmdline.txt").read_text().strip()
    )
    cmdline = " ".join(w for w in cmdline.split() if not w.startswith("console="))
    cmdline += f" console={qemu.console},115200" + (f" {qemu.append}" if qemu.append else "")
    dtb = (read_boot_file(card, manifest, qemu.device_tree or board.device_tree, work / "board.dtb")
           if qemu.board_device_tree else None)  # fmt: skip
    return (read_boot_file(card, manifest, kernel.group(1), work / "kernel"), dtb,
            read_boot_file(card, manifest, initramfs.group(1), work / "initrd"), cmdline)  # fmt: skip


def overlay(card: Path, work: Path, size: int) -> Path:
    """A qcow2 overlay of the card (the card's bytes untouched), ``size`` bytes: the SD card of
    the raspi machines must be a power of two, and a card larger than the image shows the first
    boot's growing."""
    path = work / "sd.qcow2"
    path.unlink(missing_ok=True)  # a boot tried again starts from the card as it was
    done = process.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", str(card),
                        str(path), str(size)], timeout=60, check=False)  # fmt: skip
    if done.returncode != 0:
        raise BootError(f"qemu-img could not make the overlay: {done.stderr.strip()}")
    return path


def card_size(image_size: int) -> int:
    """The emulated card: the next power of two at least twice the image."""
    size = 1 << 30
    while size < 2 * image_size:
        size <<= 1
    return size


@dataclass(frozen=True)
class Network:
    """The emulated board's one network card, on QEMU's user network: ``forward`` host loopback
    port -> the board's port (ssh). Nothing else crosses unless ``outside``: then the board
    reaches what this machine reaches (the host's loopback at 10.0.2.2, the package
    registries its builds fetch from), as a board on a LAN would."""

    forward: Mapping[int, int] = field(default_factory=dict)
    outside: bool = False


# Machines whose CPU count is fixed (the Pi 3B's BCM2837 and the Pi 2B's BCM2836: four cores).
MACHINE_CPUS = {"raspi3b": 4, "raspi2b": 4}


def single_threaded(qemu: Qemu, host_cpus: int) -> bool:
    """Whether the board's CPUs are emulated in one host thread, round robin (-accel
    tcg,thread=single), rather than one thread each (QEMU's default for ARM guests): when the
    board has more CPUs than this process may run on. Four vCPU threads on two host cores, with
    anything else running, lose whole time slices while the guest spins on a lock one of them
    holds: a raspi3b card's boot to login took 552 s beside one busy process on 2 cores, 149 s in
    one thread (alone: 160 s threaded, 167 s in one); those stalls are also what times out the
    Pi's SD host (EMULATOR_FAULT)."""
    cpus = max(qemu.smp, MACHINE_CPUS.get(qemu.machine.split(",")[0], 1))
    return cpus > host_cpus


def qemu_argv(qemu: Qemu, *, kernel: Path, dtb: Path | None, initrd: Path, cmdline: str,
              disk: Path, network: Network | None = None,
              host_cpus: int | None = None) -> list[str]:  # fmt: skip
    """The emulated board's command line: the card as its SD card (or a virtio disk on the virt
    machine), the console on stdio, no network card unless ``network`` (then one virtio NIC;
    romfile= : no PXE ROM, which Debian ships apart, in ipxe-qemu); its CPUs in one host thread
    when there are more of them than ``host_cpus`` (this process's, by default)."""
    argv = [qemu.system, "-M", qemu.machine, "-m", qemu.memory, "-kernel", str(kernel),
            "-initrd", str(initrd), "-append", cmdline]  # fmt: skip
    if host_cpus is None:
        host_cpus = len(os.sched_getaffinity(0))
    if single_threaded(qemu, host_cpus):
        argv += ["-accel", "tcg,thread=single"]
    if qemu.cpu:
        argv += ["-cpu", qemu.cpu]
    if qemu.smp > 1:
        argv += ["-smp", str(qemu.smp)]
    if dtb is not None:
        argv += ["-dtb", str(dtb)]
    argv += ["-drive", f"if={qemu.disk},format=qcow2,file={disk}"]
    if network is None:
        argv += ["-nic", "none"]
    else:
        netdev = "user,id=net0" + ("" if network.outside else ",restrict=on")
        netdev += "".join(f",hostfwd=tcp:127.0.0.1:{h}-:{g}" for h, g in network.forward.items())
        argv += ["-netdev", netdev, "-device", "virtio-net-pci,netdev=net0,romfile="]
    return [*argv, "-display", "none", "-monitor", "none",
            *["-serial", "null"] * qemu.serial_port, "-serial", "stdio", "-no-reboot"]  # fmt: skip


def boot(card: Path, board: Board, arch: str, *, user: str, password: str,
         commands: Sequence[str], work: Path, say: Say, timeout: float = 900,
         qemu: Qemu | None = None, network: Network | None = None) -> Booted:  # fmt: skip
    """Boot ``card`` (its manifest beside it), log in on the serial console as ``user``, run
    each command (its output kept), power off. A boot the emulator broke (EMULATOR_FAULT) is
    tried again from a fresh overlay (ATTEMPTS boots in all), and said (``emulator_faults``).
    ``qemu``: another machine than the board's own for ``arch`` (VIRT's)."""
    booted, faults = _retrying(card, board, arch, qemu, network, work, say, lambda argv: _boot_once(
        argv, user=user, password=password, commands=commands, work=work, say=say, timeout=timeout))  # fmt: skip
    booted.emulator_faults = faults
    return booted


def _retrying(card: Path, board: Board, arch: str, qemu: Qemu | None, network: Network | None,
              work: Path, say: Say, attempt: Callable[[list[str]], T]) -> tuple[T, list[str]]:  # fmt: skip
    """``attempt`` on the card's emulated board, from a fresh overlay each time the emulator
    broke the boot (ATTEMPTS in all); its result and the faults."""
    manifest = json.loads(card.with_name(card.name + ".manifest.json").read_text())
    qemu = qemu or board.qemu.get(arch)
    if qemu is None:
        raise UsageError(f"No emulated machine is known for a {board.name} card of {arch}",
                         fix="Add one under qemu: in the board's entry.")  # fmt: skip
    if shutil.which(qemu.system) is None:
        raise UsageError(f"{qemu.system} is not installed", fix="Run scripts/setup-host.")
    kernel, dtb, initrd, cmdline = boot_files(card, manifest, qemu, board, work)
    faults: list[str] = []
    while True:
        sd = overlay(card, work, card_size(card.stat().st_size))
        argv = qemu_argv(qemu, kernel=kernel, dtb=dtb, initrd=initrd, cmdline=cmdline, disk=sd,
                         network=network)  # fmt: skip
        say(f"booting {card.name} under {qemu.system} -M {qemu.machine}")
        try:
            return attempt(argv), faults
        except EmulatorFault as fault:
            faults.append(fault.problem)
            if len(faults) == ATTEMPTS:
                raise
            (work / "console.log").rename(work / f"console-{len(faults)}.log")
            say(f"{fault.problem}: booting the card again from a fresh overlay")


def _boot_once(argv: list[str], *, user: str, password: str, commands: Sequence[str], work: Path,
               say: Say, timeout: float) -> Booted:  # fmt: skip
    """One boot of the emulated board: login, commands, power off (boot's docstring)."""
    session = Session(argv, work, timeout)
    try:
        session.login(user, password, say)
        for command in commands:
            session.booted.outputs[command] = session.run(command)
        session.poweroff(say)
    finally:
        session.close()
    return session.booted


class Session:
    """One emulated board on its serial console, driven as a person would."""

    def __init__(self, argv: list[str], work: Path, timeout: float) -> None:
        import pexpect

        self.work, self.timeout = work, timeout
        self.log = ConsoleLog(work / "console.log")
        self.started = time.monotonic()
        self.child = pexpect.spawn(argv[0], argv[1:], encoding="utf-8", codec_errors="replace",
                                   timeout=timeout, dimensions=(50, 200))  # fmt: skip
        self.child.logfile_read = self.log
        self.booted = Booted()

    def wait(self, pattern: str | list[str], what: str, silent: float | None = SILENT) -> int:
        return expect(self.child, self.log, pattern, what, self.timeout, silent=silent)

    def login(self, user: str, password: str, say: Say) -> None:
        import pexpect

        # systemd's emergency mode never shows a login prompt: said at once, not after timeout
        seen = self.wait([r"login: ", EMERGENCY, NO_ROOT], "the login prompt on the serial console")
        if seen == 2:
            raise BootError(f"The card's initramfs did not find its root ({self.child.match.group(1)} "
                            "does not exist): its kernel lacks the driver of the emulated machine's "
                            "disk, or the card's partition table is not the one its command line "
                            "names")  # fmt: skip
        if seen:
            self.child.expect([pexpect.TIMEOUT, pexpect.EOF], timeout=5)  # what it printed next
            failed = re.findall(r"Dependency failed for .*|Timed out waiting for .*",
                                ESCAPES.sub("", (self.work / "console.log").read_text(errors="replace")))  # fmt: skip
            raise BootError("The card's system went into emergency mode"
                            + (f": {'; '.join(f.strip() for f in failed[:3])}" if failed else ""))  # fmt: skip
        self.booted.seconds_to_login = time.monotonic() - self.started
        say(f"login prompt after {self.booted.seconds_to_login:.0f} s")
        self.child.sendline(user)
        self.wait(r"Password: ", "the password prompt")
        self.child.sendline(password)
        self.wait(r"\$ ", "a shell after logging in")
        # its echo is not the prompt; systemctl and others page on a terminal (more waits)
        self.child.sendline("export SYSTEMD_PAGER=cat PAGER=cat; PS1='dockerarch''-prompt# '")
        self.wait(re.escape(PROMPT), "the shell's new prompt")

    def run(self, command: str) -> str:
        """What ``command`` printed; a BootError when it fails."""
        self.child.sendline(f"{command}; echo dockerarch-status=$?")
        # a command may work quietly for minutes under TCG: only the timeout ends it
        self.wait(r"dockerarch-status=(\d+)\r*\n", f"the end of `{command}`", silent=None)
        text = command_output(self.child.before or "").strip()
        if self.child.match.group(1) != "0":
            raise BootError(f"`{command}` failed on the booted card: {text[-800:]}")
        self.wait(re.escape(PROMPT), "the prompt")
        return text

    def poweroff(self, say: Say) -> None:
        self.child.sendline("sudo poweroff")
        self.wait(HALTED.pattern, "the kernel powering off")
        self.booted.seconds_to_poweroff = time.monotonic() - self.started
        say(f"powered off after {self.booted.seconds_to_poweroff:.0f} s")

    def close(self) -> None:
        self.child.terminate(force=True)
        self.log.close()
        self.booted.console = (self.work / "console.log").read_text(errors="replace")


@contextmanager
def running(card: Path, board: Board, arch: str, *, user: str, password: str, work: Path,
            say: Say, qemu: Qemu, network: Network | None = None,
            timeout: float = 900) -> Iterator[Session]:  # fmt: skip
    """``card`` booted and logged in on its console (a boot the emulator broke tried again, as
    boot() does), left running for the caller, powered off at the end."""

    def logged_in(argv: list[str]) -> Session:
        session = Session(argv, work, timeout)
        try:
            session.login(user, password, say)
        except BaseException:
            session.close()
            raise
        return session

    session, _ = _retrying(card, board, arch, qemu, network, work, say, logged_in)
    try:
        yield session
        session.poweroff(say)
    finally:
        session.close()


def command_output(before: str) -> str:
    """What a command printed on the console: the text after its echoed line, without colour
    codes, carriage returns or the kernel's console messages (a soft lockup under TCG)."""
    text = ESCAPES.sub("", before.split("\n", 1)[-1].replace("\r", ""))
    return KERNEL_LINES.sub("", text)


def expect(child: Any, log: ConsoleLog, pattern: str | list[str], what: str,
           timeout: float, *, silent: float | None = SILENT, slice_s: float = 10.0) -> int:  # fmt: skip
    """Which of ``pattern`` the console showed within ``timeout`` seconds. EMULATOR_FAULT,
    watched for all along, and ``silent`` seconds without a word from the board raise
    EmulatorFault (the boot is tried again); the timeout or QEMU's end raise BootError."""
    import pexpect

    patterns = [pattern] if isinstance(pattern, str) else list(pattern)
    end = time.monotonic() + timeout
    while True:
        try:
            seen = int(child.expect([*patterns, EMULATOR_FAULT], timeout=slice_s))
            break
        except pexpect.TIMEOUT:
            now = time.monotonic()
            if silent is not None and now - log.last > silent:
                raise EmulatorFault(f"the emulated board said nothing for {now - log.last:.0f} s "
                                    f"while the card was to show {what} (TCG stalled it; a card "
                                    "that stops there on every boot is the card's fault)") from None  # fmt: skip
            if now > end:
                raise BootError(f"The card did not show {what} in time") from None
        except pexpect.EOF:
            raise BootError(f"QEMU ended before the card showed {what}") from None
    if seen == len(patterns):
        raise EmulatorFault(f"the emulated SD host stalled while the card was to show {what} "
                            "(bcm2835 sdhost's timeout under TCG, not the card)")  # fmt: skip
    return seen

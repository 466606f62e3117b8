"""The ``dockerarch`` command line: one thin module per command group.

Commands only parse options and call the library; heavy modules (python-on-whales, Jinja2) are
imported inside the commands so ``dockerarch --help`` answers at once. ``main`` is the one place
that turns errors into exit codes.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Annotated

import typer

from dockerarch import __version__, process
from dockerarch.errors import INTERNAL_ERROR_EXIT, INTERRUPTED_EXIT, DockerarchError
from dockerarch.terminal import printable

app = typer.Typer(
    name="dockerarch",
    help="Build software for ARM boards (Raspberry Pi, PYNQ) on an x86 machine.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"dockerarch {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_show_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
    debug: Annotated[
        bool,
        typer.Option(
            "--debug",
            envvar="DOCKERARCH_DEBUG",
            help="Show every external command and full tracebacks.",
        ),
    ] = False,
) -> None:
    process.set_debug(debug)
    _check_python()


def _check_python() -> None:
    """tarfile's extraction filters (PEP 706), which every sdist and source archive is unpacked
    through: Python 3.11.4 and later, and the 3.11.2 of Debian 12 and Ubuntu's 3.10/3.11, which
    have them backported. A Python without them is refused before anything is unpacked."""
    import tarfile

    if not hasattr(tarfile, "data_filter"):
        from dockerarch.errors import ToolMissingError

        raise ToolMissingError(
            f"This Python ({sys.version.split()[0]}) has no tarfile extraction filters (PEP 706), "
            "which dockerarch unpacks every sdist and source archive through",
            fix="Run dockerarch with Python 3.11.4 or later (or your distribution's patched "
            "3.11: Debian 12's python3 has them), e.g. pipx install --python python3.12 .",
        )


def _register() -> None:
    from dockerarch.cli import (
        base,
        build,
        builder,
        bundle,
        doctor,
        farm,
        generate,
        img,
        nfs,
        prune,
        push,
        recipes,
        rootfs,
        targets,
        upload,
        verify,
    )  # fmt: skip

    app.command("doctor")(doctor.doctor)
    app.add_typer(targets.app, name="targets")
    app.command("recipes")(recipes.recipes)
    app.command("generate")(generate.generate)
    app.add_typer(base.app, name="base")
    app.command("build")(build.build)
    app.command("push")(push.push)
    app.command("upload")(upload.upload)
    app.command("export-rootfs")(rootfs.export_rootfs)
    app.command("chroot")(rootfs.chroot)
    app.command("export-img")(img.export_img)
    app.add_typer(nfs.app, name="nfs")
    app.add_typer(builder.app, name="builder")
    app.add_typer(farm.app, name="farm")
    app.add_typer(bundle.app, name="bundle")
    bundle.app.command("make")(bundle.make)
    bundle.app.command("check")(bundle.check)
    app.command("verify")(verify.verify)
    app.command("prune")(prune.prune)


_register()


def _debug_requested(args: list[str]) -> bool:
    if "--" in args:
        args = args[: args.index("--")]
    env = os.environ.get("DOCKERARCH_DEBUG", "").lower()
    return "--debug" in args or env in ("1", "true", "yes", "on")


def main(argv: list[str] | None = None) -> None:
    """Entry point of the console script: run the app, map every error to its exit code."""
    args = sys.argv[1:] if argv is None else list(argv)
    debug = _debug_requested(args)
    try:
        app(args=args, prog_name="dockerarch")
    except DockerarchError as exc:
        if debug:
            traceback.print_exc()
        typer.echo(exc.render(), err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        _interrupted()
    except SystemExit as exc:
        if _from_ctrl_c(exc):  # typer turns Ctrl-C into exit code 130 on its own
            _interrupted()
        raise
    except Exception as exc:
        if debug:
            traceback.print_exc()
        typer.echo(
            f"internal error: {type(exc).__name__}: {printable(str(exc))}. This is a bug in dockerarch "
            f"{__version__}: run the command again with --debug and report the traceback.",
            err=True,
        )
        sys.exit(INTERNAL_ERROR_EXIT)


def _from_ctrl_c(exc: BaseException) -> bool:
    """Whether ``exc`` was raised while a KeyboardInterrupt was handled (its causes, contexts)."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def _interrupted() -> None:
    """Ctrl-C: every program still running stopped (and waited for), then exit code 130."""
    was = process.interrupting()  # a build has stopped its own already
    stopped = process.interrupt_children(say=lambda line: typer.echo(f"  {line}", err=True))
    said = " Stopped what it had started." if stopped or was else ""
    typer.echo(f"Interrupted.{said}", err=True)
    sys.exit(INTERRUPTED_EXIT)

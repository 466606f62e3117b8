"""Options that several commands share, declared once."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from dockerarch.sets.wanted import SetRequest

Source = Annotated[
    str | None,
    typer.Option(
        "--source",
        metavar="PATH",
        help="The upstream source from this machine (a checkout or a .tar.gz/.tar.xz/.zip) "
        "instead of a git clone: qpulib, vaccel, torch, torchvision; glow needs it.",
    ),
]

# What `push` and `upload` publish: the same selection as the build that made it.
Recipe = Annotated[str, typer.Argument(help="Recipe name (dockerarch recipes lists them).")]
Arch = Annotated[str | None, typer.Option("--arch", "-a", help="armv7, aarch64, or a comma list.")]
Target = Annotated[
    str | None, typer.Option("--target", "-t", help="Board targets, e.g. rpi3,pynq-zu.")
]
Version = Annotated[str | None, typer.Option("--version", "-V", help="Recipe version.")]
Package = Annotated[
    str | None, typer.Option("--package", "-p", help="wheel recipe: what was built.")
]
Settings = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", metavar="KEY=VALUE", help="Recipe options, as built."),
]
Out = Annotated[Path, typer.Option("--out", "-o", help="Where build put its results.")]

# A wheel set (build wheel -r, upload wheel -r, export-rootfs/export-img wheel -r): pip's own
# options where pip has them.
Requirement = Annotated[
    list[Path] | None,
    typer.Option(
        "--requirement",
        "-r",
        help="wheel recipe: a requirements file, for the set of every wheel the board needs "
        "(each dependency and build requirement built once per target, or fetched as a wheel "
        "that fits the board): build makes it in OUT/<target>/sets/<name>/, upload publishes "
        "it, export-rootfs and export-img put the image it was checked in on a board; "
        "repeatable, mixes with --package.",
    ),
]
SetName = Annotated[
    str | None, typer.Option("--name", help="With -r: the set's name (default: the first file's).")
]
Constraint = Annotated[
    list[Path] | None,
    typer.Option("--constraint", "-c", help="A constraints file for the set; repeatable."),
]
BuildConstraint = Annotated[
    list[Path] | None,
    typer.Option(
        "--build-constraint",
        help="With -r: a constraints file for every build environment of the set (not for "
        "what the board installs), as uv's and pip's; repeatable.",
    ),
]
NoDeps = Annotated[
    bool,
    typer.Option(
        "--no-deps",
        help="With -r: build only the packages named; what they need must have wheels for "
        "the board (said before anything is built).",
    ),
]
NoBinary = Annotated[
    list[str] | None,
    typer.Option(
        "--no-binary",
        metavar="NAMES",
        help="With -r or --package: build these from their sdists even where the index has a "
        "wheel for the board (comma-separated names, :all:, :none:; repeatable), as pip's.",
    ),
]
IndexUrl = Annotated[
    str | None,
    typer.Option("--index-url", "-i", help="With -r: the index to resolve from (pip's default)."),
]
ExtraIndexUrl = Annotated[
    list[str] | None,
    typer.Option("--extra-index-url", help="With -r: a further index; repeatable."),
]
FindLinks = Annotated[
    list[str] | None,
    typer.Option(
        "--find-links",
        "-f",
        metavar="DIR",
        help="With -r: a directory of wheels and sdists to take files from beside the index "
        "(a vendor's wheels, say), as pip's; repeatable.",
    ),
]
RequireHashes = Annotated[
    bool, typer.Option("--require-hashes", help="With -r: every requirement must carry --hash.")
]
TestRequires = Annotated[
    list[str] | None,
    typer.Option(
        "--test-requires",
        metavar="REQ",
        help="With -r: what your tests need (pytest, say), resolved for the board and "
        "installed beside the set for --test only; repeatable.",
    ),
]
TestCommand = Annotated[
    str | None,
    typer.Option(
        "--test",
        metavar="COMMAND",
        help="With -r: run COMMAND in the set's runtime image under QEMU after the import "
        "check, network off ({project} is --test-sources, read-only); failing fails the build.",
    ),
]
TestSources = Annotated[
    Path | None,
    typer.Option("--test-sources", help="With --test: the directory {project} names (default: .)."),
]


def userland_set(requirement: list[Path] | None, set_name: str | None,
                 image: str | None) -> SetRequest | None:  # fmt: skip
    """The set export-rootfs and export-img take the userland from (-r, --name), if any."""
    from dockerarch.errors import UsageError
    from dockerarch.sets.wanted import SetRequest

    if not requirement:
        if set_name:
            raise UsageError("--name names a set, and no -r was given",
                             fix="Give the requirements files the set was built from: -r FILE.")  # fmt: skip
        return None
    if image:
        raise UsageError("-r and --image each say what the userland is",
                         fix="Give one: the set built from -r FILE, or --image REF.")  # fmt: skip
    return SetRequest(requirement_files=list(requirement), name=set_name)

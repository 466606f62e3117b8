"""Single-image ``docker save`` archives: the one reader of their OCI image layout.

Docker 25 and later write ``docker save`` as an OCI image layout (``index.json``, ``oci-layout``
and ``blobs/sha256/...``). export-rootfs reads an image's layers from it, bottom first, and
``push --archive`` merges several into one layout of a multi-arch index; both read it here.
"""

from __future__ import annotations

import json
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from dockerarch.errors import EngineError

BLOBS = "blobs/sha256/"


class SavedImage:
    """One image's ``docker save`` archive, open for reading."""

    def __init__(self, archive: tarfile.TarFile, image: str) -> None:
        self.archive = archive
        self.image = image

    def read(self, name: str) -> IO[bytes]:
        try:
            handle = self.archive.extractfile(name)
        except KeyError:
            handle = None
        if handle is None:
            raise EngineError(
                f"docker save of {self.image} wrote no {name}: not an OCI image layout",
                fix="dockerarch reads docker save's OCI layout, which Docker 25 and later write.",
            )
        return handle

    def descriptor(self) -> dict[str, Any]:
        """index.json's one entry: the image manifest's media type, digest and size."""
        manifests = json.load(self.read("index.json")).get("manifests") or []
        if len(manifests) != 1:
            raise EngineError(
                f"docker save of {self.image} wrote an index of {len(manifests)} images, not one",
                fix="Save one image at a time.",
            )
        descriptor: dict[str, Any] = manifests[0]
        return descriptor

    def manifest(self) -> dict[str, Any]:
        manifest: dict[str, Any] = json.load(self.read(blob_name(self.descriptor()["digest"])))
        return manifest

    def layers(self) -> Iterator[tuple[str, IO[bytes]]]:
        """Each layer blob, bottom first, with a name to report it by."""
        for number, layer in enumerate(self.manifest()["layers"], 1):
            yield f"layer {number} ({layer['digest'][:19]})", self.read(blob_name(layer["digest"]))

    def blobs(self) -> Iterator[tuple[tarfile.TarInfo, IO[bytes]]]:
        """Every blob file of the layout (manifests, configs, layers)."""
        for member in self.archive:
            if member.isfile() and member.name.startswith(BLOBS):
                yield member, self.read(member.name)


def blob_name(digest: str) -> str:
    """The layout's path of a ``sha256:...`` digest."""
    algorithm, _, hexdigest = digest.partition(":")
    if algorithm != "sha256" or not hexdigest.isalnum():
        raise EngineError(f"an OCI layout names the blob {digest!r}, not a sha256 digest")
    return BLOBS + hexdigest


@contextmanager
def open_saved(path: Path, image: str) -> Iterator[SavedImage]:
    """``path``, written by ``docker save`` of ``image`` (named in errors)."""
    with tarfile.open(path) as archive:
        yield SavedImage(archive, image)

"""The one reader of docker save's OCI layouts (export-rootfs's layers, push --archive's blobs)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from dockerarch import oci
from dockerarch.errors import EngineError


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _layout(path: Path, layers: list[bytes], *, images: int = 1, index: bool = True) -> Path:
    files: dict[str, bytes] = {}
    descriptors = []
    for blob in layers:
        files[oci.blob_name(_digest(blob))] = blob
    manifest = json.dumps({"layers": [{"digest": _digest(b)} for b in layers]}).encode()
    files[oci.blob_name(_digest(manifest))] = manifest
    descriptors = [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": _digest(manifest), "size": len(manifest)}] * images  # fmt: skip
    if index:
        files["index.json"] = json.dumps({"manifests": descriptors}).encode()
    with tarfile.open(path, "w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def test_layers_come_bottom_first_and_blobs_are_every_file(tmp_path: Path) -> None:
    saved = _layout(tmp_path / "image.tar", [b"bottom", b"top"])
    with oci.open_saved(saved, "img") as layout:
        assert [handle.read() for _, handle in layout.layers()] == [b"bottom", b"top"]
        assert next(name for name, _ in layout.layers()).startswith("layer 1 (sha256:")
        assert layout.descriptor()["size"] > 0
        assert len(list(layout.blobs())) == 3  # two layers and the manifest


@pytest.mark.parametrize(
    ("kw", "message"),
    [({"index": False}, "docker save of img wrote no index.json"),
     ({"images": 2}, "an index of 2 images, not one")],
)  # fmt: skip
def test_what_is_not_a_single_image_layout_is_an_engine_error(
    tmp_path: Path, kw: dict[str, object], message: str
) -> None:
    saved = _layout(tmp_path / "image.tar", [b"x"], **kw)  # type: ignore[arg-type]
    with oci.open_saved(saved, "img") as layout, pytest.raises(EngineError, match=message):
        list(layout.layers())


def test_a_blob_is_named_by_its_sha256_only() -> None:
    assert oci.blob_name("sha256:ab12") == "blobs/sha256/ab12"
    with pytest.raises(EngineError, match="not a sha256 digest"):
        oci.blob_name("sha256:../../etc/passwd")

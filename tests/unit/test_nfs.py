from __future__ import annotations

from pathlib import Path

import pytest

from .cli import run


@pytest.mark.parametrize(
    ("record", "problem"),
    [
        (b'[{"path": "/srv/x", "client": "10.0.0.0/24"', "Expecting"),  # cut short
        (b'{"path": "/srv/x"}', "a list of exports, not dict"),
        (b'[{"path": "/srv/x", "colour": "red"}]', "unexpected keyword argument 'colour'"),
        (b"[\xff]", "can't decode byte 0xff"),
    ],
)
def test_a_corrupt_record_of_exports_is_named_with_what_to_do(
    record: bytes, problem: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setenv("DOCKERARCH_STATE_DIR", str(tmp_path))
    path = tmp_path / "nfs" / "exports.json"
    path.parent.mkdir()
    path.write_bytes(record)
    code, _, err = run(["nfs", "ls"], capsys)
    said = " ".join(err.split())
    assert code == 3 and "Traceback" not in err, err
    assert f"dockerarch's record of its NFS exports, {path}, cannot be read:" in said
    assert problem in said and f"remove {path} and serve again" in said
    assert path.read_bytes() == record  # never rewritten from a guess


@pytest.mark.parametrize("client", ["10.0.2.0/24; rm -rf /", "a b", "-host", "*.example(rw)"])
def test_nfs_serve_checks_the_client_as_export_rootfs_does(
    client: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setenv("DOCKERARCH_STATE_DIR", str(tmp_path / "state"))
    for argv in (["nfs", "serve", str(tmp_path), "--client", client],
                 ["export-rootfs", "--image", "x:1", "--target", "debian-armv7",
                  str(tmp_path / "tree"), "--client", client]):  # fmt: skip
        code, _, err = run(argv, capsys)
        assert code == 2 and "Traceback" not in err, err
        assert f"--client {client!r} is not a network (CIDR), a host name or *" in " ".join(
            err.split()
        )
    assert not (tmp_path / "state").exists()  # nothing recorded, nothing started

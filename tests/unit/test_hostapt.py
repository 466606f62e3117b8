from __future__ import annotations

from pathlib import Path

import pytest

from dockerarch import hostapt
from dockerarch.errors import ConfigError

DEB822 = """\
Types: deb
# a comment inside the stanza
URIs: http://mirror.example.invalid/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example.invalid/debian-security
Suites: bookworm-security
Components: main
"""

ONE_LINE = """\
# deb http://old.example.invalid/debian bookworm main
deb [arch=amd64 signed-by=/etc/apt/keyrings/site.gpg] http://site.example.invalid/debian bookworm main contrib
deb-src http://site.example.invalid/debian bookworm main
"""


def test_deb822_picks_the_release_suite_not_security(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(DEB822)
    mirror = hostapt.debian_mirror(hostapt.read_sources(tmp_path))
    assert mirror == hostapt.DebianMirror(
        "http://mirror.example.invalid/debian",
        "/usr/share/keyrings/debian-archive-keyring.gpg",
        "bookworm",
    )


def test_one_line_format_with_options(tmp_path: Path) -> None:
    (tmp_path / "sources.list").write_text(ONE_LINE)
    mirror = hostapt.debian_mirror(hostapt.read_sources(tmp_path))
    assert mirror.uri == "http://site.example.invalid/debian"
    assert mirror.keyring == "/etc/apt/keyrings/site.gpg"


def test_disabled_stanzas_and_our_own_file_are_skipped(tmp_path: Path) -> None:
    parts = tmp_path / "sources.list.d"
    parts.mkdir()
    (parts / "a.sources").write_text("Enabled: no\n" + DEB822.split("\n\n")[0] + "\n")
    (parts / "dockerarch-trixie.sources").write_text(
        "Types: deb\nURIs: http://ours.example.invalid/debian\nSuites: trixie\nComponents: main\n"
    )
    with pytest.raises(ConfigError, match="No Debian archive mirror"):
        hostapt.debian_mirror(hostapt.read_sources(tmp_path))


def test_no_sources_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        hostapt.debian_mirror(hostapt.read_sources(tmp_path))
    assert "--mirror" in caught.value.message


def test_suite_stanza_reuses_mirror_and_keyring() -> None:
    mirror = hostapt.DebianMirror("http://m.example.invalid/debian", "/k.gpg", "bookworm")
    stanza = hostapt.suite_sources(mirror, "trixie")
    assert "URIs: http://m.example.invalid/debian\n" in stanza
    assert "Suites: trixie\n" in stanza
    assert "Signed-By: /k.gpg\n" in stanza


def test_module_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "sources.list").write_text(ONE_LINE)
    assert hostapt.main(["--etc-apt", str(tmp_path), "mirror"]) == 0
    assert capsys.readouterr().out == "http://site.example.invalid/debian\n"
    assert hostapt.main(["--etc-apt", str(tmp_path / "none"), "mirror"]) == ConfigError.exit_code
    assert capsys.readouterr().err.startswith("error: No Debian archive mirror")

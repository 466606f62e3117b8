from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import dockerarch

from .conftest import dockerarch as run_cli

HEAVY = ("python_on_whales", "pydantic", "jinja2", "yaml")


def test_help_imports_nothing_heavy() -> None:
    """--help must stay instant: the engine and template libraries load only when used."""
    code = (
        "import sys\n"
        "from dockerarch.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_console_script_version() -> None:
    """The entry point pip installed beside the interpreter, as `make demo` calls it."""
    script = Path(sys.executable).parent / "dockerarch"
    done = subprocess.run([str(script), "--version"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"dockerarch {dockerarch.__version__}"
    assert run_cli("--version").stdout == done.stdout

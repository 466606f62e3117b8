from __future__ import annotations

from dockerarch.cli import main

main()

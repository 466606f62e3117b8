"""dockerarch: build software for ARM boards on an ordinary x86 machine."""

from __future__ import annotations

__version__ = "0.1.0"

"""The shared compiler cache's size limit: the objects least recently used go first.

scripts/setup-host runs this file (the standard library only) as the cache's own system user,
beside nginx: every --interval seconds it adds up the objects under --store and, when they hold
more than --max-size, removes the least recently used until they hold 90% of it, as ccache's own
local cache cleans up. "Used" is the later of an object's modification time (written) and its
access time (read by nginx; the kernel's relatime updates it at most daily, which is the
granularity a team's cache needs). What it found and removed is written to --status (JSON) for
`dockerarch doctor`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import stat
import sys
import tempfile
import time
from collections.abc import Iterator

LOW_WATER = 0.9  # a sweep that must remove anything removes down to this share of the limit
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """``20G``, ``512M``, ``1.5T`` or bytes; binary units, as ccache's max_size."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", text, re.IGNORECASE)
    if not found or float(found.group(1)) <= 0:
        raise ValueError(f"{text!r} is not a size (like 20G, 512M)")
    return int(float(found.group(1)) * _UNITS[found.group(2).upper()])


def objects(store: str) -> Iterator[tuple[float, int, str]]:
    """(last used, size, path) of every object file below ``store``."""
    for root, _dirs, files in os.walk(store):
        for name in files:
            path = os.path.join(root, name)
            try:
                info = os.lstat(path)
            except FileNotFoundError:
                continue  # removed or replaced while we looked
            if stat.S_ISREG(info.st_mode):
                yield max(info.st_atime, info.st_mtime), info.st_size, path


def to_evict(found: list[tuple[float, int, str]], limit: int) -> list[str]:
    """The paths to remove so that what is left holds at most LOW_WATER of ``limit``, least
    recently used first; none while everything fits the limit."""
    total = sum(size for _, size, _ in found)
    if total <= limit:
        return []
    goal, chosen = int(limit * LOW_WATER), []
    for _, size, path in sorted(found):
        if total <= goal:
            break
        chosen.append(path)
        total -= size
    return chosen


def sweep(store: str, limit: int) -> dict[str, int]:
    """One pass: the store's size before and after, and how many objects were removed."""
    found = list(objects(store))
    before = sum(size for _, size, _ in found)
    removed = freed = 0
    sizes = {path: size for _, size, path in found}
    for path in to_evict(found, limit):
        try:
            os.unlink(path)
        except FileNotFoundError:
            continue
        removed, freed = removed + 1, freed + sizes[path]
    return {"bytes": before - freed, "objects": len(found) - removed, "limit": limit,
            "evicted": removed, "freed": freed, "at": int(time.time())}  # fmt: skip


def write_status(path: str, status: dict[str, int]) -> None:
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".sweep-", dir=directory)
    with os.fdopen(fd, "w") as out:
        json.dump(status, out)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--max-size", required=True, type=parse_size)
    parser.add_argument("--status", required=True)
    parser.add_argument("--interval", type=float, default=60.0)
    parser.add_argument("--once", action="store_true", help="one sweep, then exit")
    args = parser.parse_args(argv)
    evicted = 0
    while True:
        status = sweep(args.store, args.max_size)
        evicted += status["evicted"]
        write_status(args.status, {**status, "evicted_since_start": evicted})
        if status["evicted"]:
            print(f"removed {status['evicted']} objects ({status['freed']} bytes): the store "
                  f"holds {status['bytes']} of {args.max_size}", flush=True)  # fmt: skip
        if args.once:
            return 0
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())

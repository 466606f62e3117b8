"""Wheel sets, `dockerarch build wheel -r requirements.txt`: every wheel a board needs, built once per target,
installed with no compiler.

For each target the set is resolved first (closure.resolve: the requirements' closure for the
board's Python, and each sdist's build requirements), then:

1. every distribution with a wheel that fits the board is downloaded, its hash checked, and put
   through the board-ABI gate a built wheel passes (artifacts.board_gate);
2. every other one is built hybrid from its sdist, in dependency order, as `build wheel` builds a
   source tree, with the named context ``wheelset``: the wheels its build requirements resolved to
   (and its run-time closure) and ``build-constraints.txt`` pinning them. Its build environment
   takes them from there with no index (no sdist is built on the side: numpy is the set's numpy)
   and its runtime image installs from there with no network;
3. the set is written to ``OUT/<target>/sets/<name>/``: its wheels, ``requirements.txt`` with
   every file's sha256 (the lock file: any pip on any board reads it, --require-hashes), and
   manifest.json (what was fetched from where, what was built with each build's record, and the
   apt packages the board needs);
4. the set is installed into the target's runtime image from the set alone (no index, no
   network) and every top-level module of it imported there, under QEMU.

Wheels land in ``OUT/<target>/wheels/`` (fetched) and in each build's own result directory
(built); a build that fails is said with the package that needed it, the rest is kept, and a
re-run builds only what is missing.
"""

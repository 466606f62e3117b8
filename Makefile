# The two commands of the README, and their parts. Every target sets the host up first:
# scripts/setup-host is idempotent and takes a second or two when nothing is missing.
VENV ?= .venv
PYTEST_ARGS ?=

.PHONY: setup demo test lint unit integration stop

setup:
	scripts/setup-host

# The main job on the built-in defaults: a real PyPI sdist built hybrid, verified and smoke-tested
# for both ARM arches; the verified wheels' paths are printed last. The build bootstraps the bases
# it lacks (both ARM arches, and amd64 for the native compilers), and makes the native toolchain
# from the amd64 base while the ARM bases are still being made.
demo: setup
	$(VENV)/bin/dockerarch doctor
	$(VENV)/bin/dockerarch build wheel --package 'zstandard==0.23.0' --arch armv7,aarch64

# Lint first (seconds): ruff's rules and formatting, and mypy --strict on the package.
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy --strict dockerarch

# The suite in two phases. The tests marked serial change what every test shares (they stop the
# daemons, remove the machine's bases and machine images, prune): they run alone, first. The rest
# run on $(WORKERS) pytest-xdist workers, each module (or group: tests/conftest.py) whole on one,
# the longest first: a serial run leaves one of the two cores idle half the time (dpkg under
# QEMU, a board's boot, pip). "No tests collected" (exit 5) in one phase is fine (-k picks a
# few); in both it is a failure, with a message.
WORKERS ?= 2
define phases
	@py=$(VENV)/bin/python; \
	$$py -m pytest -m "serial and ($(1))" $(PYTEST_ARGS); one=$$?; \
	$$py -m pytest -m "not serial and ($(1))" -n $(WORKERS) --dist loadscope $(PYTEST_ARGS); two=$$?; \
	if [ $$one -eq 5 ] && [ $$two -eq 5 ]; then \
		echo "make: pytest collected no tests, which is a failure here." >&2; exit 1; fi; \
	for rc in $$one $$two; do [ $$rc -eq 0 ] || [ $$rc -eq 5 ] || exit $$rc; done
endef

test: setup lint
	$(call phases,integration or not integration)

unit: setup
	$(VENV)/bin/python -m pytest -m "not integration" -n $(WORKERS) $(PYTEST_ARGS)

integration: setup
	$(call phases,integration)

stop:
	scripts/setup-host --stop

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

test: setup lint
	@$(VENV)/bin/python -m pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests, which is a failure here." >&2; exit 1; fi; \
	exit $$rc

unit: setup
	$(VENV)/bin/python -m pytest -m "not integration" $(PYTEST_ARGS)

integration: setup
	$(VENV)/bin/python -m pytest -m integration $(PYTEST_ARGS)

stop:
	scripts/setup-host --stop

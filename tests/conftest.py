from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Everything under tests/integration drives the real engine and is marked so."""
    for item in items:
        if "integration" in item.path.parts:
            item.add_marker(pytest.mark.integration)

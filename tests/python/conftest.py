# Shared fixtures for the Python parity tests: where the leantune binary and ../shared are.
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def leantune_bin():
    b = os.environ.get("LEANTUNE_BIN", str(ROOT / "build" / "bin" / "leantune"))
    if not os.path.exists(b):
        pytest.fail(f"leantune binary not found at {b}; build first or set LEANTUNE_BIN")
    return b


@pytest.fixture(scope="session")
def shared_dir():
    return pathlib.Path(os.environ.get("LEANTUNE_SHARED", str(ROOT.parent / "shared")))

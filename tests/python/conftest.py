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


@pytest.fixture(scope="session")
def fault_bin(leantune_bin):
    """leantune_fault_train (tests/tools/fault_train.cpp): `leantune train` with fault injection."""
    b = os.environ.get("LEANTUNE_FAULT_BIN", str(pathlib.Path(leantune_bin).parent / "leantune_fault_train"))
    if not os.path.exists(b):
        pytest.fail(f"leantune_fault_train not found at {b}; build it (LT_BUILD_TESTS) or set LEANTUNE_FAULT_BIN")
    return b

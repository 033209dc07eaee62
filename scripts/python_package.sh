#!/usr/bin/env bash
# The Python package as a user gets it: a fresh virtual environment (VENV, default
# build/python-venv, made anew), `pip install .` from the repository root, an import from outside
# the repository, then tests/python/test_package.py in that environment.
# The build requirements (scikit-build-core, nanobind) are installed first and the package is built
# without isolation, so that the build tree build-python/ of an earlier install (scripts/test.sh's
# `pip install .` into .venv) is reused: only what changed is rebuilt; ccache, when installed, serves
# objects compiled in other trees (build/ compiles the engine with the same flags).
# LEANTUNE_BIN: the CLI the tests compare with (default build/bin/leantune).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=$(realpath -m "${VENV:-build/python-venv}")
PY=${PYTHON:-python3}
rm -rf "$VENV"
"$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q scikit-build-core nanobind numpy pytest
CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} "$VENV/bin/pip" install -q --no-build-isolation .
(cd /tmp && "$VENV/bin/python" -c "import leantune, numpy; print('imported', leantune.__file__)")
export LEANTUNE_BIN=${LEANTUNE_BIN:-$PWD/build/bin/leantune}
export LEANTUNE_SHARED=${LEANTUNE_SHARED:-$(cd .. && pwd)/shared}
"$VENV/bin/python" -m pytest -q tests/python/test_package.py

#!/usr/bin/env bash
# Installs what the tests need (Debian packages, a .venv with the PyPI oracles), builds, installs
# the Python package into .venv (pip install .), and runs every test: the GoogleTest suite, the
# Python parity and package tests and the package in a fresh virtual environment (CTest), then the GoogleTest suite
# again in an AddressSanitizer + UBSan build, then a short smoke run of every libFuzzer harness.
# Each stage runs even when an earlier one failed; the summary at the end names every stage that
# failed and the exit status is non-zero if any did.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-build-deps.sh
bash scripts/install-test-deps.sh
export LEANTUNE_SHARED=${LEANTUNE_SHARED:-$(cd .. && pwd)/shared}

echo "== release build + all tests"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLT_PYTHON_TESTS=ON >/dev/null
failed=()
if ninja -C build -j"$(nproc)"; then
  # the package tests (tests/python/test_package.py) run in .venv with what this tree builds
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) .venv/bin/pip install -q --no-build-isolation . || failed+=("python package install")
  (cd build && ctest --output-on-failure -j2 --timeout 1800) || failed+=("release tests")
else
  failed+=("release build")
fi

echo "== AddressSanitizer + UBSan build: parsers, kernels, model, training (the long fine-tune excluded)"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLT_SANITIZE=ON >/dev/null
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
if ninja -C build-asan -j"$(nproc)" leantune_tests leantune; then
  (cd build-asan && ctest --output-on-failure -j2 --timeout 1800 -E "TrainAesop") || failed+=("sanitizer tests")
  # the CLI's bad-input and validation tests against the sanitized binary: every bad input must end
  # with a message and a non-zero status, never a signal or a sanitizer report
  LEANTUNE_SANITIZED=1 LEANTUNE_BIN=$PWD/build-asan/bin/leantune LEANTUNE_FAULT_BIN=$PWD/build-asan/bin/leantune_fault_train \
    .venv/bin/python -m pytest -q tests/python/test_bad_inputs.py tests/python/test_validation_cli.py \
    || failed+=("sanitizer CLI tests")
  # the server's bad requests (malformed JSON, unknown model, too long, negative max_tokens, 100 MB
  # body, a client gone mid-stream, a full queue, 1,000 at once): each server must exit cleanly on
  # SIGTERM with no sanitizer report and no leak (tests/python/test_server.py checks; ~1-2 min)
  LEANTUNE_SANITIZED=1 LEANTUNE_BIN=$PWD/build-asan/bin/leantune \
    .venv/bin/python -m pytest -q tests/python/test_server.py \
    -k "bad_requests or client_gone or full_queue or thousand" || failed+=("sanitizer server tests")
else
  failed+=("sanitizer build")
fi

echo "== fuzz smoke: every libFuzzer harness for 10 s (clang; scripts/fuzz.sh)"
bash scripts/fuzz.sh 10 || failed+=("fuzz smoke")

if [ ${#failed[@]} -gt 0 ]; then
  echo "== FAILED stages: ${failed[*]}"
  exit 1
fi
echo "== all stages passed"

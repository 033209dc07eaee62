#!/usr/bin/env bash
# Installs what the tests need (Debian packages, a .venv with the PyPI oracles), builds, installs
# the Python package into .venv (pip install .), and runs every test: the GoogleTest suite, the
# Python parity and package tests and the package in a fresh virtual environment (CTest), then the GoogleTest suite
# again in an AddressSanitizer + UBSan build, with every fuzz harness replaying its seed corpus and
# kept regression inputs (real fuzzing, with clang and libFuzzer, is scripts/fuzz.sh: not run here).
# Each stage runs even when an earlier one failed; the summary at the end names every stage that
# failed and the exit status is non-zero if any did. Every stage's start is printed with the time
# since the start ("== [12m34s] release build"), and the end prints each stage's duration and
# compilations.
set -euo pipefail
cd "$(dirname "$0")/.."

# Stage timing: `stage NAME` ends the running stage and starts NAME; `stage_summary` prints each
# stage's time and, where it compiled, ccache's hits and misses (a miss is a compilation).
T0=$SECONDS
stage_names=()
stage_secs=()
stage_cc=()
stage_t0=0
stage_hm0="0 0"
mmss() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }
ccache_hm() {  # "HITS MISSES" so far in this ccache directory ("0 0" without ccache)
  { command -v ccache >/dev/null && ccache --print-stats 2>/dev/null || true; } | awk '
    $1 == "direct_cache_hit" || $1 == "preprocessed_cache_hit" { h += $2 }
    $1 == "cache_miss" { m += $2 }
    END { print h + 0, m + 0 }'
}
stage_end() {
  if [ ${#stage_names[@]} -gt ${#stage_secs[@]} ]; then
    stage_secs+=($((SECONDS - stage_t0)))
    local h0 m0 h m
    read -r h0 m0 <<<"$stage_hm0"
    read -r h m <<<"$(ccache_hm)"
    if [ $((h + m - h0 - m0)) -gt 0 ]; then stage_cc+=("(ccache: $((h - h0)) hits, $((m - m0)) compiled)"); else stage_cc+=(""); fi
  fi
}
stage() {
  stage_end
  stage_names+=("$1")
  stage_t0=$SECONDS
  stage_hm0=$(ccache_hm)
  echo "== [$(mmss $((SECONDS - T0)))] $1"
}
stage_summary() {
  stage_end
  echo "== stage times (total $(mmss $((SECONDS - T0))))"
  local i
  for i in "${!stage_names[@]}"; do
    printf '   %9s  %s %s\n' "$(mmss "${stage_secs[$i]}")" "${stage_names[$i]}" "${stage_cc[$i]}"
  done
}

# ccache, with its cache in the checkout (.cache/ccache, git-ignored) unless CCACHE_DIR names one:
# `pip install .` compiles the engine again in build-python/ with the same flags as build/ (CMakeLists.txt,
# pyproject.toml), and ccache serves it build/'s objects; a second run of this script reuses them all.
# CCACHE_BASEDIR makes the compile commands relative to each build tree, so they match across trees.
# ccache also hashes the compiler's name: /usr/bin/c++ (CMake's default) and g++ (scikit-build-core's)
# would not share, so both builds are told g++.
export CCACHE_DIR=${CCACHE_DIR:-$PWD/.cache/ccache} CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
export CC=${CC:-gcc} CXX=${CXX:-g++}
LAUNCHER=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

stage "install build and test dependencies"
bash scripts/install-build-deps.sh
bash scripts/install-test-deps.sh
export LEANTUNE_SHARED=${LEANTUNE_SHARED:-$(cd .. && pwd)/shared}

stage "release build"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLT_PYTHON_TESTS=ON "${LAUNCHER[@]}" >/dev/null
failed=()
if ninja -C build -j"$(nproc)"; then
  # the package tests (tests/python/test_package.py) run in .venv with what this tree builds
  stage "python package install (pip install .)"
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) .venv/bin/pip install -q --no-build-isolation \
    -C cmake.define.CMAKE_C_COMPILER_LAUNCHER=ccache -C cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache . \
    || failed+=("python package install")
  stage "release tests (ctest)"
  (cd build && ctest --output-on-failure -j2 --timeout 1800) || failed+=("release tests")
else
  failed+=("release build")
fi

stage "AddressSanitizer + UBSan build: parsers, kernels, model, training (the long fine-tune excluded)"
# LT_UNITY: the libraries, the CLI and the fuzz harnesses compiled 8 files at a time (CMakeLists.txt)
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLT_SANITIZE=ON -DLT_UNITY=ON "${LAUNCHER[@]}" >/dev/null
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# fuzz_replay: every fuzz harness as a standalone executable; CTest replays the seed corpora and
# tests/fuzz/regressions/ through them (fuzz_replay_*; scripts/fuzz.sh fuzzes with clang + libFuzzer)
if ninja -C build-asan -j"$(nproc)" leantune_tests leantune fuzz_replay; then
  stage "sanitizer tests (ctest; with the fuzz corpora and regression inputs)"
  # left out: the long fine-tunes (TrainAesop*) and the two chi-square tests of speculative sampling
  # (2,000 sampled requests each: 135 s each under ASan; the release run checks their statistics,
  # and SpecSampling.SeededOutputDependsOnlyOnTheSeed takes the same code through ASan)
  (cd build-asan && ctest --output-on-failure -j2 --timeout 1800 -E "TrainAesop|SpecSampling.OutputIsDistributedAsTheModel") \
    || failed+=("sanitizer tests")
  # the CLI's bad-input and validation tests against the sanitized binary: every bad input must end
  # with a message and a non-zero status, never a signal or a sanitizer report
  stage "sanitizer CLI tests (pytest)"
  LEANTUNE_SANITIZED=1 LEANTUNE_BIN=$PWD/build-asan/bin/leantune LEANTUNE_FAULT_BIN=$PWD/build-asan/bin/leantune_fault_train \
    .venv/bin/python -m pytest -q tests/python/test_bad_inputs.py tests/python/test_validation_cli.py \
    || failed+=("sanitizer CLI tests")
  # the server's bad requests (malformed JSON, unknown model, too long, negative max_tokens, 100 MB
  # body, a client gone mid-stream, a full queue, 1,000 at once): each server must exit cleanly on
  # SIGTERM with no sanitizer report and no leak (tests/python/test_server.py checks; ~1-2 min)
  stage "sanitizer server tests (pytest)"
  LEANTUNE_SANITIZED=1 LEANTUNE_BIN=$PWD/build-asan/bin/leantune \
    .venv/bin/python -m pytest -q tests/python/test_server.py \
    -k "bad_requests or client_gone or full_queue or thousand" || failed+=("sanitizer server tests")
else
  failed+=("sanitizer build")
fi

stage_summary
if [ ${#failed[@]} -gt 0 ]; then
  echo "== FAILED stages: ${failed[*]}"
  exit 1
fi
echo "== all stages passed"

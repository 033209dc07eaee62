#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz/; clang, ASan + UBSan) in build-fuzz/, generates the
# seed corpora (scripts/fuzz_corpus.py) and runs every fuzzer, one after the other, for SECONDS
# each (default 60). Prints executions and coverage per fuzzer; exits non-zero if any fuzzer found
# a crash, leak, timeout or out-of-memory input (kept under build-fuzz/crashes/<fuzzer>/; turn it
# into a regression input under tests/fuzz/regressions/<fuzzer>/ once fixed).
# Usage: scripts/fuzz.sh [SECONDS] [FUZZER...]      e.g. scripts/fuzz.sh 300 fuzz_safetensors
# Env: LT_FUZZ_STRICT=1 also stops on any exception other than lt::Error (a library's message
# reaching the user); FUZZ_ARGS adds libFuzzer flags; LEANTUNE_SHARED names the shared data.
set -uo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-60}
shift $(( $# > 0 ? 1 : 0 ))
B=build-fuzz
SHARED=${LEANTUNE_SHARED:-$(cd .. && pwd)/shared}
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found (bash scripts/install-build-deps.sh)"; exit 2; }

# The whole library is compiled (a hand-kept list of sources to leave out broke the link whenever a
# parser started to call into another module); the linker takes only what the harnesses use.
LAUNCHER=()
command -v ccache >/dev/null && LAUNCHER=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
echo "== fuzz: building $B (clang, libFuzzer + ASan + UBSan)"
CC=clang CXX=clang++ cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLT_FUZZ=ON \
  -DLT_BUILD_TESTS=OFF -DLT_EXCLUDE="" "${LAUNCHER[@]}" >/dev/null || exit 2
ninja -C "$B" -j"$(nproc)" fuzzers || exit 2

PY=python3
[ -x .venv/bin/python ] && PY=.venv/bin/python
"$PY" scripts/fuzz_corpus.py "$B/corpus" "$SHARED" 2>/dev/null | tail -1 || exit 2

if [ $# -gt 0 ]; then FUZZERS=("$@"); else
  mapfile -t FUZZERS < <(cd tests/fuzz && ls fuzz_*.cpp | sed 's/\.cpp$//' | grep -v '^fuzz_common$')
fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
mkdir -p "$B/logs"
failed=()
printf '%-24s %12s %8s %8s %8s  %s\n' fuzzer executions exec/s cov ft result
for f in "${FUZZERS[@]}"; do
  mkdir -p "$B/crashes/$f" "$B/corpus/$f"
  args=(-max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
        -artifact_prefix="$B/crashes/$f/")
  [ -f "$B/corpus/$f.dict" ] && args+=(-dict="$B/corpus/$f.dict")
  dirs=("$B/corpus/$f")
  [ -d "tests/fuzz/regressions/$f" ] && dirs+=("tests/fuzz/regressions/$f")
  # shellcheck disable=SC2086
  "$B/bin/$f" "${args[@]}" ${FUZZ_ARGS:-} "${dirs[@]}" >"$B/logs/$f.log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$B/logs/$f.log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$B/logs/$f.log" | tail -1)
  cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$B/logs/$f.log" | tail -1)
  result=ok
  foreign=$(grep -c '^lt_fuzz: exception other than lt::Error' "$B/logs/$f.log")
  [ "$foreign" -gt 0 ] && result="ok; $foreign exception type(s) other than lt::Error (see the log)"
  if [ $rc -ne 0 ]; then
    result="FAILED (rc $rc): $(ls -t "$B/crashes/$f" | head -1) (log $B/logs/$f.log)"
    failed+=("$f")
  fi
  printf '%-24s %12s %8s %8s %8s  %s\n' "$f" "${execs:-?}" "${rate:-?}" "$(echo "$cov" | awk '{print $2}')" \
    "$(echo "$cov" | awk '{print $4}')" "$result"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: ${#failed[@]} fuzzer(s) found a problem: ${failed[*]} (inputs under $B/crashes/)"
  exit 1
fi

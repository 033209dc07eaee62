// The libFuzzer entry point of one harness, for the standalone replay executables of the gcc
// sanitizer build (CMakeLists.txt, LT_FUZZ_REPLAY): compiled once per harness with
// LT_FUZZ_HARNESS=<name>, it calls lt::fuzz::<name> (tests/fuzz/fuzz_<name>.cpp, compiled once into
// lt_fuzz_harnesses, which leantune_tests links too) through the same run_one as the clang build.
#define LT_FUZZ_MAIN 1
#include "../fuzz_common.h"

LT_FUZZ_ENTRY(lt::fuzz::LT_FUZZ_HARNESS)

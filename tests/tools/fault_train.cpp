// leantune_fault_train: `leantune train` for tests that need a fault at a chosen moment. It takes
// the same arguments as `leantune train` ([CONFIG.yaml] --key value ...) plus, first:
//   --fault-sleep-ms MS              sleep after every optimizer step (so a test can kill it mid-run)
//   --fault-abort-at-checkpoint N    abort() once checkpoint N is written, before LATEST names it
//   --fault-abort-after-checkpoint N abort() once LATEST names checkpoint N
// The faults go through the Trainer's fault-injection seam (leantune::FaultInjection,
// include/leantune/trainer.h); production code reads no test variables.
// Built only with LT_BUILD_TESTS. Errors print like the CLI's and exit 1.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "leantune/trainer.h"

namespace {

int to_int(const std::string& flag, const std::string& v) {
  try {
    size_t used = 0;
    int n = std::stoi(v, &used);
    if (used == v.size() && n >= 0) return n;
  } catch (...) {
  }
  throw leantune::Error(flag + ": '" + v + "' is not a non-negative whole number");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::vector<std::string> args;
    int sleep_ms = 0, abort_at = -1, abort_after = -1;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      const bool fault = a == "--fault-sleep-ms" || a == "--fault-abort-at-checkpoint" ||
                         a == "--fault-abort-after-checkpoint";
      if (!fault) {
        args.push_back(a);
        continue;
      }
      if (i + 1 >= argc) throw leantune::Error(a + " needs a value");
      const int v = to_int(a, argv[++i]);
      (a == "--fault-sleep-ms" ? sleep_ms : a == "--fault-abort-at-checkpoint" ? abort_at : abort_after) = v;
    }
    leantune::FaultInjection faults;
    if (sleep_ms > 0)
      faults.after_step = [sleep_ms](int) { std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms)); };
    if (abort_at >= 0)
      faults.checkpoint_written = [abort_at](int step) {
        if (step == abort_at) std::abort();
      };
    if (abort_after >= 0)
      faults.checkpoint_published = [abort_after](int step) {
        if (step == abort_after) std::abort();
      };
    leantune::Trainer trainer(leantune::TrainerConfig::from_args(args));
    trainer.set_fault_injection(faults);
    trainer.run();
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "leantune_fault_train: error: %s\n", e.what());
    return 1;
  }
  return 0;
}

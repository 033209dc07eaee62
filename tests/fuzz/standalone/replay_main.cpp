// A main() for the fuzz harnesses without libFuzzer (as LLVM's StandaloneFuzzTargetMain): every
// file named on the command line, and every file under each directory named (recursively, in
// name order), goes once through LLVMFuzzerTestOneInput. The gcc sanitizer build links one such
// executable per harness (CMakeLists.txt, LT_FUZZ_REPLAY), and CTest replays the seed corpora and
// tests/fuzz/regressions/ with them: no clang needed to check that the kept inputs stay fixed.
// Usage: fuzz_<name> [-timeout=SECONDS] FILE|DIR...   Fails (non-zero status) when an input
// crashes, trips a sanitizer, aborts (LT_FUZZ_STRICT=1: an exception other than lt::Error), or
// runs longer than the timeout (default 10 s, as scripts/fuzz.sh); and when there is no input.
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace fs = std::filesystem;

namespace {

// The input being run, preformatted so that a signal handler can write it.
char g_running[4096] = "lt_fuzz_replay: no input yet\n";

void on_signal(int sig) {
  const char* what = sig == SIGALRM ? "timeout on " : "aborted on ";
  (void)!write(2, what, std::strlen(what));
  (void)!write(2, g_running, std::strlen(g_running));
  if (sig == SIGALRM) _exit(70);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

std::vector<fs::path> inputs_of(const std::vector<std::string>& args) {
  std::vector<fs::path> files;
  for (const std::string& a : args) {
    if (fs::is_directory(a)) {
      std::vector<fs::path> in_dir;
      for (const auto& e : fs::recursive_directory_iterator(a))
        if (e.is_regular_file()) in_dir.push_back(e.path());
      std::sort(in_dir.begin(), in_dir.end());
      files.insert(files.end(), in_dir.begin(), in_dir.end());
    } else if (fs::is_regular_file(a)) {
      files.push_back(a);
    } else {
      std::fprintf(stderr, "lt_fuzz_replay: %s is neither a file nor a directory\n", a.c_str());
      std::exit(2);
    }
  }
  return files;
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

}  // namespace

int main(int argc, char** argv) {
  unsigned timeout_s = 10;
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "-timeout=", 9) == 0) {
      timeout_s = unsigned(std::strtoul(argv[i] + 9, nullptr, 10));
    } else if (argv[i][0] == '-') {
      std::fprintf(stderr, "lt_fuzz_replay: unknown option %s (usage: %s [-timeout=S] FILE|DIR...)\n", argv[i], argv[0]);
      return 2;
    } else {
      args.push_back(argv[i]);
    }
  }
  std::vector<fs::path> files = inputs_of(args);
  if (files.empty()) {
    std::fprintf(stderr, "lt_fuzz_replay: no input files (usage: %s [-timeout=S] FILE|DIR...)\n", argv[0]);
    return 2;
  }
  std::signal(SIGABRT, on_signal);
  std::signal(SIGALRM, on_signal);
  for (const fs::path& f : files) {
    std::snprintf(g_running, sizeof g_running, "%s\n", f.c_str());
    std::string bytes = read_file(f);
    alarm(timeout_s);
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    alarm(0);
  }
  std::fprintf(stderr, "lt_fuzz_replay: %zu inputs ran cleanly\n", files.size());
  return 0;
}

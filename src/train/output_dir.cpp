// Checkpoint names, LATEST, the output-folder guard and metrics.jsonl (train/output_dir.h).
#include "train/output_dir.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mapped_file.h"
#include "core/atomic_file.h"

namespace fs = std::filesystem;

namespace lt {

namespace {

// Untrusted file content for a message: printable ASCII kept, other bytes as \xNN, cut short.
std::string excerpt(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size() && out.size() < 40; ++i) {
    const unsigned char ch = static_cast<unsigned char>(s[i]);
    out += ch >= 0x20 && ch < 0x7f && ch != '\\' ? std::string(1, char(ch)) : fmt::format("\\x{:02x}", ch);
  }
  return out.size() < 40 ? out : out + "...";
}

bool is_real_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(fs::symlink_status(p, ec));
}

}  // namespace

std::string checkpoint_name(int step) { return fmt::format("checkpoint-{}", step); }

bool is_checkpoint_name(const std::string& name) {
  const std::string prefix = "checkpoint-";
  if (name.size() <= prefix.size() || name.size() > prefix.size() + 10 || name.compare(0, prefix.size(), prefix) != 0)
    return false;
  for (size_t i = prefix.size(); i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return false;
  return true;
}

std::string read_latest(const std::string& out_dir) {
  const fs::path latest = fs::path(out_dir) / "LATEST";
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(latest, ec))) return "";
  const std::string text = read_text_file(latest.string());
  std::string name = text;
  if (!name.empty() && name.back() == '\n') name.pop_back();  // written by hand with echo
  if (!name.empty() && name.back() == '\r') name.pop_back();
  const char* fix = "LATEST is written by leantune: if it was edited or damaged, write the name of the newest complete "
                    "checkpoint-N folder into it, or start over with --overwrite-output-dir";
  LT_CHECK(is_checkpoint_name(name), "{}: holds '{}', which is not a checkpoint folder name (expected checkpoint-<step>, "
           "one path component inside {}); nothing was opened or removed. {}", latest.string(), excerpt(text), out_dir,
           fix);
  const fs::path dir = fs::path(out_dir) / name;
  LT_CHECK(is_real_dir(dir), "{}: names '{}', but {} is {}; nothing was opened or removed. {}", latest.string(), name,
           dir.string(), fs::exists(fs::symlink_status(dir, ec)) ? "not a folder (a link or a file)" : "missing", fix);
  LT_CHECK(fs::weakly_canonical(dir, ec).parent_path() == fs::weakly_canonical(out_dir, ec),
           "{}: names '{}', which resolves outside {}; nothing was opened or removed. {}", latest.string(), name,
           out_dir, fix);
  return name;
}

std::string resolve_checkpoint(const std::string& path, const std::string& out_dir) {
  if (path != "auto") return path;
  const std::string name = read_latest(out_dir);
  return name.empty() ? "" : (fs::path(out_dir) / name).string();
}

void publish_checkpoint(const std::string& out_dir, const std::string& name, const std::string& previous) {
  LT_ASSERT(is_checkpoint_name(name) && (previous.empty() || is_checkpoint_name(previous)));
  try {
    write_text_file_atomic((fs::path(out_dir) / "LATEST").string(), name);
  } catch (const Error& e) {
    fail("{}: the checkpoint was written but could not be published: {}. {}", (fs::path(out_dir) / name).string(),
         e.what(), previous.empty() ? std::string("No earlier checkpoint had been published.")
                                    : fmt::format("The previous checkpoint {} is intact and LATEST still names it.",
                                                  (fs::path(out_dir) / previous).string()));
  }
  if (previous.empty() || previous == name) return;
  std::error_code ec;
  fs::remove_all(fs::path(out_dir) / previous, ec);
  if (ec)
    fmt::print(stderr, "warning: {}: the superseded checkpoint could not be removed: {}\n",
               (fs::path(out_dir) / previous).string(), ec.message());
}

// Temporary files of write_file_atomic (NAME.tmp.XXXXXX) that a killed run left in out_dir.
static void remove_stale_temp_files(const std::string& out_dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(out_dir, ec)) {
    const std::string f = e.path().filename().string();
    const size_t t = f.rfind(".tmp.");
    if (t == std::string::npos || f.size() != t + 11) continue;
    const std::string base = f.substr(0, t);
    if (base == "LATEST" || base == "metrics.jsonl" || base == "ledger.json" || base == "report.html" ||
        (base.rfind("ledger-rank", 0) == 0 && base.size() > 16 && base.compare(base.size() - 5, 5, ".json") == 0))
      fs::remove(e.path(), ec);
  }
}

void prepare_output_dir(const std::string& out_dir, bool resuming, bool overwrite) {
  if (!is_real_dir(out_dir)) return;
  remove_stale_temp_files(out_dir);
  if (resuming) return;
  std::vector<std::string> found;
  for (const char* f : {"LATEST", "metrics.jsonl", "adapter", "model"})
    if (fs::exists(fs::path(out_dir) / f)) found.push_back(f);
  std::vector<fs::path> checkpoints;
  for (const auto& e : fs::directory_iterator(out_dir))
    if (is_checkpoint_name(e.path().filename().string()) && is_real_dir(e.path())) checkpoints.push_back(e.path());
  if (!checkpoints.empty()) found.push_back(fmt::format("{} checkpoint folder{}", checkpoints.size(),
                                                        checkpoints.size() > 1 ? "s" : ""));
  if (found.empty()) return;
  LT_CHECK(overwrite, "{}: holds a previous run's outputs ({}); a new run would replace them. Continue that run with "
           "--resume auto (resume: auto), write to another output_dir, or replace them on purpose with "
           "--overwrite-output-dir (overwrite_output_dir: true)", out_dir, fmt::join(found, ", "));
  // the previous run's checkpoints go; metrics.jsonl, the adapter and the model are rewritten
  std::error_code ec;
  fs::remove(fs::path(out_dir) / "LATEST", ec);
  for (const auto& p : checkpoints) fs::remove_all(p, ec);
}

void write_checkpoint_folder(const std::string& out_dir, const std::string& name, const std::string& previous,
                             const std::function<void(const std::string&)>& write) {
  const fs::path dir = fs::path(out_dir) / name;
  try {
    fs::create_directories(dir);
    write(dir.string());
  } catch (const std::exception& e) {
    std::error_code ec;
    if (name != previous) fs::remove_all(dir, ec);  // unfinished and unpublished
    fail("{}: the checkpoint could not be written: {}. {}", dir.string(), e.what(),
         previous.empty() ? std::string("No earlier checkpoint had been published.")
                          : fmt::format("The previous checkpoint {} is intact and LATEST still names it (resume from "
                                        "it with --resume auto once the cause is fixed).",
                                        (fs::path(out_dir) / previous).string()));
  }
}

MetricsLog::MetricsLog(const std::string& out_dir, long keep_records)
    : path_((fs::path(out_dir) / "metrics.jsonl").string()) {
  std::string kept;
  bool rewrite = keep_records < 0;  // a new run: an empty file
  if (keep_records >= 0 && fs::exists(path_)) {
    const std::string text = read_text_file(path_);
    size_t end = 0;
    for (long r = 0; r < keep_records; ++r) {
      const size_t nl = text.find('\n', end);
      if (nl == std::string::npos) break;
      end = nl + 1;
      ++records_;
    }
    kept = text.substr(0, end);
    rewrite = end < text.size();  // records after the checkpoint (or a partial line) to drop
  }
  if (rewrite) write_text_file_atomic(path_, kept);  // temp + fsync + rename
  f_ = std::fopen(path_.c_str(), "a");
  LT_CHECK(f_, "{}: cannot open for appending: {}", path_, std::strerror(errno));
  LT_CHECK(std::fseek(f_, 0, SEEK_END) == 0 && (bytes_ = std::ftell(f_)) >= 0, "{}: cannot seek: {}", path_,
           std::strerror(errno));
}

MetricsLog::~MetricsLog() {
  if (f_) std::fclose(f_);
}

void MetricsLog::append(const nlohmann::json& record) {
  if (!f_) return;
  const std::string line = record.dump() + "\n";
  const bool ok = std::fwrite(line.data(), 1, line.size(), f_) == line.size() && std::fflush(f_) == 0;
  if (!ok) {
    const int e = errno;
    std::clearerr(f_);
    // cut the partial record: the file ends after the last complete one
    const bool cut = ::ftruncate(::fileno(f_), bytes_) == 0;
    fail("{}: cannot append a metrics record: {}{}", path_, std::strerror(e),
         cut ? "" : "; the file may end in a partial line");
  }
  bytes_ += long(line.size());
  ++records_;
}

void MetricsLog::sync() {
  if (f_) LT_CHECK(::fsync(::fileno(f_)) == 0, "{}: fsync failed: {}", path_, std::strerror(errno));
}

void MetricsLog::close() {
  if (!f_) return;
  std::FILE* f = f_;
  f_ = nullptr;
  LT_CHECK(std::fclose(f) == 0, "{}: close failed: {}", path_, std::strerror(errno));
}

long metrics_records_up_to(const std::string& out_dir, int step) {
  const std::string path = (fs::path(out_dir) / "metrics.jsonl").string();
  if (!fs::exists(path)) return 0;
  const std::string text = read_text_file(path);
  long n = 0;
  for (size_t begin = 0; begin < text.size();) {
    const size_t nl = text.find('\n', begin);
    if (nl == std::string::npos) break;  // a partial last line is dropped
    const auto j = nlohmann::json::parse(text.substr(begin, nl - begin), nullptr, false);
    if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer() || j["step"].get<long>() > step) break;
    ++n;
    begin = nl + 1;
  }
  return n;
}

}  // namespace lt

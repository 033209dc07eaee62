// A training run's output folder: the checkpoint folders (checkpoint-<step>) and LATEST, which
// names the published one; the guard against a second run silently replacing a previous run's
// outputs; and metrics.jsonl, appended record by record with every write checked.
// Nothing read from disk is trusted: a checkpoint name from LATEST must be one path component of
// the form checkpoint-<digits>, resolving to a folder inside the output folder, before anything
// is opened or removed.
#pragma once
#include <cstdio>
#include <functional>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace lt {

// "checkpoint-<step>".
std::string checkpoint_name(int step);
// Whether `name` is checkpoint-<digits> (one path component, nothing else).
bool is_checkpoint_name(const std::string& name);

// The checkpoint folder name LATEST in out_dir names ("" when there is no LATEST); lt::Error
// naming LATEST and an excerpt of its content when it is not a valid checkpoint name or does not
// resolve to a folder inside out_dir.
std::string read_latest(const std::string& out_dir);

// The full path of the checkpoint folder `path` means: "auto" = the one LATEST names in out_dir
// ("" when none), anything else is a folder the user named.
std::string resolve_checkpoint(const std::string& path, const std::string& out_dir);

// Atomically points LATEST at `name` (already written), then removes the previously published
// checkpoint folder `previous` (a name read_latest returned) when it differs.
void publish_checkpoint(const std::string& out_dir, const std::string& name, const std::string& previous);

// Before a run writes anything: a run that does not resume refuses an output folder holding a
// previous run's outputs (LATEST, checkpoints, metrics.jsonl, adapter/, model/), naming --resume auto
// and --overwrite-output-dir; with overwrite, the previous checkpoints and LATEST are removed.
void prepare_output_dir(const std::string& out_dir, bool resuming, bool overwrite);

// Writes a checkpoint folder out_dir/name with `write(dir)`. On failure removes the unfinished
// folder (never the published one) and throws lt::Error saying which checkpoint failed and whether
// the previous one (`previous`) is intact.
void write_checkpoint_folder(const std::string& out_dir, const std::string& name, const std::string& previous,
                             const std::function<void(const std::string& dir)>& write);

// metrics.jsonl, one JSON record per line. Every write is checked; a failed append is cut back so
// the file never ends in a partial record.
class MetricsLog {
 public:
  MetricsLog() = default;  // closed: append() does nothing
  // Opens out_dir/metrics.jsonl. keep_records < 0: a new, empty file. Otherwise a resume: the file
  // keeps its first keep_records records (the ones written up to the checkpoint) and the rest are
  // dropped through a temporary file + fsync + rename, then new records append.
  MetricsLog(const std::string& out_dir, long keep_records);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  void append(const nlohmann::json& record);
  // fsync: every record so far is on disk (before a checkpoint that counts them is published).
  void sync();
  long records() const { return records_; }
  void close();  // checked; also done by the destructor (unchecked there)

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
  long records_ = 0;
  long bytes_ = 0;
};

// The metrics records to keep on a resume from `step` when the checkpoint did not record a count:
// every record of the file whose "step" is at most `step`.
long metrics_records_up_to(const std::string& out_dir, int step);

}  // namespace lt

// Hugging Face cache lookup for repo ids (see hf_cache.h).
#include "core/hf_cache.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace lt {

namespace fs = std::filesystem;

namespace {

bool repo_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
}

bool is_commit_hash(std::string_view s) {
  return s.size() == 40 && s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

struct RepoId {
  std::string repo, revision;
};

RepoId split_repo_id(const std::string& s) {
  size_t at = s.find('@');
  if (at == std::string::npos) return {s, ""};
  return {s.substr(0, at), s.substr(at + 1)};
}

// The snapshot folder of `revision` in `repo_dir`, or "" with `why` saying what is missing.
std::string find_snapshot(const fs::path& repo_dir, const std::string& revision, std::string& why) {
  std::error_code ec;
  if (!fs::is_directory(repo_dir, ec)) {
    why = "no folder " + repo_dir.string();
    return "";
  }
  std::string hash = revision;
  if (!is_commit_hash(revision)) {
    fs::path ref = repo_dir / "refs" / revision;
    std::error_code ec2;
    if (!fs::is_regular_file(ref, ec2) && revision.rfind("refs/", 0) == 0) ref = repo_dir / revision;  // "refs/pr/1"
    std::ifstream f(ref);
    if (!(f >> hash)) {
      why = "no ref " + ref.string() + " (the revision '" + revision + "' was not downloaded)";
      return "";
    }
  }
  const fs::path snap = repo_dir / "snapshots" / hash;
  if (!fs::is_directory(snap, ec)) {
    why = "no snapshot " + snap.string();
    return "";
  }
  return snap.string();
}

}  // namespace

std::string hf_hub_cache_dir() {
  if (std::string d = env("HF_HUB_CACHE"); !d.empty()) return d;
  if (std::string d = env("HUGGINGFACE_HUB_CACHE"); !d.empty()) return d;  // huggingface_hub's older name
  if (std::string d = env("HF_HOME"); !d.empty()) return (fs::path(d) / "hub").string();
  if (std::string d = env("XDG_CACHE_HOME"); !d.empty()) return (fs::path(d) / "huggingface" / "hub").string();
  return (fs::path(env("HOME").empty() ? "/" : env("HOME")) / ".cache" / "huggingface" / "hub").string();
}

bool looks_like_repo_id(std::string_view s) {
  const RepoId id = split_repo_id(std::string(s));
  const std::string& r = id.repo;
  const size_t slash = r.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == r.size() || r.find('/', slash + 1) != std::string::npos)
    return false;
  for (char c : r)
    if (c != '/' && !repo_char(c)) return false;
  if (r[0] == '.' || r[slash + 1] == '.' || r.find("..") != std::string::npos) return false;
  if (s.find('@') != std::string_view::npos && id.revision.empty()) return false;
  for (const char* ext : {".bin", ".safetensors", ".json", ".gguf", ".model", ".jsonl", ".txt", ".yaml", ".yml", ".pt"}) {
    const std::string e = ext;
    if (r.size() > e.size() && r.compare(r.size() - e.size(), e.size(), e) == 0) return false;
  }
  return true;
}

std::string resolve_model_path(const std::string& path) {
  std::error_code ec;
  if (path.empty() || fs::exists(path, ec) || !looks_like_repo_id(path)) return path;
  const RepoId id = split_repo_id(path);
  const std::string revision = id.revision.empty() ? "main" : id.revision;
  std::string folder = "models--" + id.repo;
  folder.replace(folder.find('/'), 1, "--");
  const fs::path cache = hf_hub_cache_dir();
  std::string why;
  std::string snap = find_snapshot(cache / folder, revision, why);
  if (!snap.empty()) return snap;
  const std::string rev_flag = id.revision.empty() ? "" : " --revision " + id.revision;
  fail("{}: no such file or folder, and the Hugging Face repo '{}' (revision {}) is not in the local cache: {}. "
       "leantune looked in {} (the cache is $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub) and "
       "never downloads; fetch the model with `hf download {}{}` (or `huggingface-cli download {}{}`), then run again",
       path, id.repo, revision, why, cache.string(), id.repo, rev_flag, id.repo, rev_flag);
}

}  // namespace lt

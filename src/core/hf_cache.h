// Model paths that name a Hugging Face repo: "HuggingFaceTB/SmolLM2-135M" (optionally
// "@revision": a branch or tag name under refs/, or a commit hash) resolves to its snapshot folder
// in the local Hugging Face cache, as huggingface_hub lays it out:
//   <cache>/models--<org>--<name>/refs/<revision>       (a file holding the commit hash)
//   <cache>/models--<org>--<name>/snapshots/<hash>/...  (symlinks to ../../blobs/<sha>)
// where <cache> is $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub,
// else ~/.cache/huggingface/hub. Nothing is ever downloaded. A path that exists always wins.
// Usage: std::string dir = lt::resolve_model_path(user_path);  // then load dir as before
#pragma once
#include <string>
#include <string_view>

namespace lt {

// `path` when it exists, or when it cannot be a repo id (then the loader reports it missing);
// the snapshot folder of the repo id otherwise. lt::Error when it looks like a repo id but the
// cache has no such snapshot: the message says where it looked and the command that fetches it.
std::string resolve_model_path(const std::string& path);

// "org/name" or "org/name@revision" with Hugging Face's repo-name characters, and not a file
// name (no .bin / .safetensors / .json / .gguf / ... ending).
bool looks_like_repo_id(std::string_view s);

// The cache folder huggingface_hub uses (see above).
std::string hf_hub_cache_dir();

}  // namespace lt

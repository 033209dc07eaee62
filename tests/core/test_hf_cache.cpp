// Hugging Face repo ids as model paths (core/hf_cache.h): which strings are repo ids, the cache
// folder from the environment, refs / commit hashes to snapshots, an existing path winning, and the
// message for a repo that is not in the cache. (tests/python/test_hf_cache.py loads a real model.)
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "../io/io_test_util.h"
#include "core/error.h"
#include "core/hf_cache.h"

namespace lt {
namespace {

namespace fs = std::filesystem;

// Sets an environment variable for the test's duration.
struct EnvVar {
  std::string name, old;
  bool had;
  EnvVar(const char* n, const std::string& v) : name(n) {
    const char* o = std::getenv(n);
    had = o != nullptr;
    if (had) old = o;
    ::setenv(n, v.c_str(), 1);
  }
  ~EnvVar() {
    if (had) ::setenv(name.c_str(), old.c_str(), 1);
    else ::unsetenv(name.c_str());
  }
};

TEST(HfCache, WhatLooksLikeARepoId) {
  for (const char* s : {"HuggingFaceTB/SmolLM2-135M", "org/name@main", "a_b/c.d-e@v1.0", "org/name@refs/pr/1"})
    EXPECT_TRUE(looks_like_repo_id(s)) << s;
  for (const char* s : {"model", "/abs/path", "./rel/x", "a/b/c", "org/", "/name", "org/model.safetensors",
                        "dir/tok512.bin", "org/name@", "../x", "org/na me", "data/train.jsonl"})
    EXPECT_FALSE(looks_like_repo_id(s)) << s;
}

TEST(HfCache, CacheFolderFromTheEnvironment) {
  EnvVar a("HF_HUB_CACHE", ""), b("HUGGINGFACE_HUB_CACHE", ""), c("HF_HOME", ""), d("XDG_CACHE_HOME", ""), h("HOME", "/h");
  EXPECT_EQ(hf_hub_cache_dir(), "/h/.cache/huggingface/hub");
  ::setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT_EQ(hf_hub_cache_dir(), "/xdg/huggingface/hub");
  ::setenv("HF_HOME", "/hf", 1);
  EXPECT_EQ(hf_hub_cache_dir(), "/hf/hub");
  ::setenv("HF_HUB_CACHE", "/cache", 1);
  EXPECT_EQ(hf_hub_cache_dir(), "/cache");
}

TEST(HfCache, RefsAndHashesResolveToSnapshots) {
  test::TempDir tmp;
  EnvVar cache("HF_HUB_CACHE", tmp.path);
  const std::string h1(40, 'a'), h2 = std::string(39, 'b') + "1";
  const fs::path repo = fs::path(tmp.path) / "models--org--m";
  fs::create_directories(repo / "snapshots" / h1);
  fs::create_directories(repo / "snapshots" / h2);
  fs::create_directories(repo / "refs" / "pr");
  std::ofstream(repo / "refs" / "main") << h1;
  std::ofstream(repo / "refs" / "pr" / "1") << h2 << "\n";
  EXPECT_EQ(resolve_model_path("org/m"), (repo / "snapshots" / h1).string());
  EXPECT_EQ(resolve_model_path("org/m@refs/pr/1"), (repo / "snapshots" / h2).string());
  EXPECT_EQ(resolve_model_path("org/m@" + h2), (repo / "snapshots" / h2).string());
  EXPECT_EQ(resolve_model_path("not/a/repo"), "not/a/repo");  // not a repo id: the loader reports it
  const std::string msg = test::error_of([] { resolve_model_path("org/m@v3"); });
  test::expect_contains(msg, {"org/m@v3", "revision v3", "refs/v3", "hf download org/m --revision v3", tmp.path});
  const std::string missing = test::error_of([] { resolve_model_path("org/none"); });
  test::expect_contains(missing, {"models--org--none", "huggingface-cli download org/none", "never downloads"});
}

TEST(HfCache, AnExistingPathWins) {
  test::TempDir tmp;
  EnvVar cache("HF_HUB_CACHE", tmp.path);
  fs::create_directories(fs::path(tmp.path) / "org" / "m");
  const fs::path cwd = fs::current_path();
  fs::current_path(tmp.path);
  EXPECT_EQ(resolve_model_path("org/m"), "org/m");
  fs::current_path(cwd);
}

}  // namespace
}  // namespace lt

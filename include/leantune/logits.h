// A testing aid for comparing the forward pass with other implementations: the next-token logits
// after a prompt (one prefill) and after each further token fed one at a time through the KV
// cache, written as raw little-endian f32 rows ((1 + decode.size()) × vocab_size).
//
// Usage:
//   leantune::Model model("stories260K.bin");
//   std::vector<int> prompt = {1, 403, 407}, decode = {261, 3};
//   leantune::write_logits_file("logits.f32", model, prompt, decode);  // 3 rows of 512 floats
#pragma once
#include <span>
#include <string>

#include "leantune/sequence.h"

namespace leantune {

class Model;

// Writes the whole file or nothing under `path` (a temporary file, checked writes, fsync, rename):
// leantune::Error naming the path when a write fails, and naming the token id or position when
// one does not fit the model or the context.
void write_logits_file(const std::string& path, const Model& model, std::span<const int> prompt,
                       std::span<const int> decode, const SequenceOptions& options = {});

}  // namespace leantune

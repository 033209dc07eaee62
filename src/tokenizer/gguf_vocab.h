// A tokenizer as GGUF stores it (tokenizer.ggml.*), as plain data: what the GGUF export writes
// and what the tokenizer of a GGUF model is built from. The tokenizer module cannot read GGUF
// files (io is on its floor): the model floor extracts this from the metadata
// (model/model_tokenizer.h) and make_gguf_tokenizer builds the Tokenizer.
//   model "llama": SentencePiece BPE from tokens + scores + token_type (llama2c_tokenizer.h, the
//                  algorithm of llama.cpp's SPM tokenizer)
//   model "gpt2":  byte-level BPE from tokens + merges, the pre-tokenizer chosen by `pre` as
//                  llama.cpp does: llama-bpe (llama3, llama-v3), qwen2, smollm, gpt-2 (default)
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace lt::gguf {

// llama_token_type
enum : int32_t { kTokNormal = 1, kTokUnknown = 2, kTokControl = 3, kTokUser = 4, kTokUnused = 5, kTokByte = 6 };

struct Vocab {
  std::string model;  // "llama" (SentencePiece-style) | "gpt2" (byte-level BPE)
  std::string pre;    // tokenizer.ggml.pre, gpt2 only
  std::vector<std::string> tokens;
  std::vector<float> scores;        // llama only
  std::vector<int32_t> types;       // llama_token_type per token (empty: all normal)
  std::vector<std::string> merges;  // gpt2 only: "left right", by rank
  int bos = -1, eos = -1, unk = -1, pad = -1;
  bool add_bos = false, add_eos = false;
  bool add_space_prefix = true;     // llama only: tokenizer.ggml.add_space_prefix
};

// The pre-tokenizer names make_gguf_tokenizer accepts for model "gpt2".
constexpr const char* kSupportedPre = "llama-bpe (llama3, llama-v3), qwen2, smollm, gpt-2 (default)";

}  // namespace lt::gguf

namespace lt {

// The Tokenizer of `v`; `source` (the GGUF file) is named in messages. lt::Error for another
// tokenizer model or pre-tokenizer (naming it, with the supported ones), lists of different
// lengths, or ids outside the vocabulary.
std::unique_ptr<Tokenizer> make_gguf_tokenizer(const gguf::Vocab& v, const std::string& source);

}  // namespace lt

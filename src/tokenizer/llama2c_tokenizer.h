// SentencePiece BPE as llama2.c's run.c encodes and decodes it (the same algorithm as llama.cpp's
// SPM tokenizer): from a llama2.c tokenizer .bin (written by llama2.c's tokenizer.py), or from a
// vocabulary given as data (a GGUF's tokenizer.ggml.* with model "llama": tokenizer/gguf_vocab.h).
#pragma once
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace lt {

struct SpmVocab {
  std::vector<std::string> pieces;  // SentencePiece's "▁" written as ' ' (as llama2.c stores it)
  std::vector<float> scores;        // the adjacent pair whose merge scores highest merges first
  std::vector<bool> special;        // control / unknown tokens: dropped by decode(skip_special)
  std::vector<bool> unused;         // decoded as nothing, no text (GGUF's unused tokens); empty: none
  std::vector<int> text_tokens;     // ids recognized when written in the text (control, user-defined)
  std::array<int, 256> byte_ids;    // the byte-fallback token of each byte, -1 when none
  int bos = -1, eos = -1;
  int unk = -1;                     // for a byte without a byte-fallback token; -1: that is an error
  bool add_bos = true, add_eos = false;  // what encode(add_special) adds
  bool add_space_prefix = true;     // " " before the text, and after each token recognized in it
  bool one_entry_per_model_token = false;  // llama2.c: the file lists exactly the model's tokens
  // decode() as llama.cpp's llama_detokenize (GGUF) rather than run.c: a leading BOS is dropped
  // with the special tokens, and only the first piece loses its dummy-prefix space (run.c strips
  // the piece after every BOS, shown or not).
  bool llama_cpp_decode = false;
};

// The tokenizer of `v`; `source` names it in messages. lt::Error when the lists' lengths differ
// or an id is outside the vocabulary.
std::unique_ptr<Tokenizer> make_spm_tokenizer(const std::string& source, SpmVocab v);

// Parses `bytes` (the contents of `path`, named in errors) as a llama2.c tokenizer .bin.
std::unique_ptr<Tokenizer> load_llama2c_tokenizer(const std::string& path, const std::string& bytes);

}  // namespace lt

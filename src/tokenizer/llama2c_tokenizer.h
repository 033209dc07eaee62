// The llama2.c tokenizer (.bin written by llama2.c's tokenizer.py export): a SentencePiece BPE
// vocabulary of (score, piece) pairs, encoded and decoded exactly as llama2.c's run.c does.
#pragma once
#include <string>

#include "tokenizer/tokenizer.h"

namespace lt {

// Parses `bytes` (the contents of `path`, named in errors) as a llama2.c tokenizer .bin.
std::unique_ptr<Tokenizer> load_llama2c_tokenizer(const std::string& path, const std::string& bytes);

}  // namespace lt

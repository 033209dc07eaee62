// Added tokens of a tokenizer.json ("added_tokens"): found in the text before the model runs,
// leftmost-longest (as tokenizers' aho-corasick LeftmostLongest), honouring lstrip, rstrip and
// single_word. Tokens with normalized=false are matched in the raw text, the others in the
// normalized text of the pieces between those.
#pragma once
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace lt::hf {

struct AddedToken {
  int id = -1;
  std::string content;
  bool special = false, lstrip = false, rstrip = false, single_word = false, normalized = true;
};

class AddedTokenMatcher {
 public:
  void add(const AddedToken& t);
  bool empty() const { return tokens_.empty(); }
  // Splits `s` into pieces: {token id or -1, start, end}; non-token pieces may be empty.
  struct Span {
    int id;
    size_t a, b;
  };
  std::vector<Span> split(std::string_view s) const;

 private:
  struct Node {
    std::unordered_map<unsigned char, int> next;
    int token = -1;  // index into tokens_
  };
  std::vector<AddedToken> tokens_;
  std::vector<Node> nodes_{1};
};

}  // namespace lt::hf

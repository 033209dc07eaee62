// Fine-tuning data: loads plain text and JSONL datasets into tokenized Examples, each with ids and
// per-token labels (kIgnoreLabel on tokens the loss skips: prompts, user turns, template headers).
// Labels here are NOT shifted: labels[i] says whether/what ids[i] is trained as; the DataLoader
// (data_loader.h) shifts them for next-token prediction.
// Inputs:
//   .txt / .md    documents separated by runs of >= min_blank_lines blank lines (whitespace-only
//                 lines), or the whole file as one document (doc_separator = file). Each document
//                 is encoded with the tokenizer's add_special prefix (BOS) plus EOS; loss on all.
//   .jsonl        one JSON object per line (blank lines skipped), one of
//                   {"text": s}                                  loss on all tokens
//                   {"prompt": p, "completion": c}               loss on completion + EOS
//                   {"instruction": i, "input": x?, "output": o} Alpaca template, loss on output + EOS
//                   {"messages": [{"role", "content"}, ...]}     chat template (chat_template.h),
//                   (+ "tools": [...] for a Jinja template)      loss on assistant turns only
//                 With a Jinja template (the model's own), the whole conversation is its rendering:
//                 no BOS prefix is added (the template writes the BOS it wants, as transformers
//                 encodes apply_chat_template's text without special tokens) and messages may carry
//                 any keys the template reads (tool_calls, reasoning_content, ...).
//   a directory   every *.txt / *.md file in it (sorted by name) is one document, every *.jsonl
//                 file is read as above.
// Rendered pieces are tokenized separately (add_special=false) and concatenated after the BOS
// prefix, as HF/Axolotl do for prompt/completion, so labels line up with ids exactly.
// Usage: auto ex = load_examples("data/train.jsonl", *tok, DataOptions{});
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/backward.h"
#include "tokenizer/tokenizer.h"
#include "train/chat_template.h"

namespace lt {

struct Example {
  std::vector<int> ids;     // (n) token ids, BOS first when the tokenizer adds one
  std::vector<int> labels;  // (n) ids[i] where trained, kIgnoreLabel where not (same length as ids)
};

enum class DocSeparator { BlankLine, File };
DocSeparator parse_doc_separator(std::string_view name);  // "blank_line" | "file"; lt::Error otherwise

struct DataOptions {
  DocSeparator doc_separator = DocSeparator::BlankLine;  // plain text: how documents are separated
  int min_blank_lines = 1;           // blank-line runs shorter than this stay inside a document (>= 1)
  ChatTemplate chat_template = ChatTemplate::ChatML;  // for {"messages"} records, unless `jinja`
  std::shared_ptr<const HfChatTemplate> jinja;        // a Jinja chat template (the model's): wins when set
  std::string jinja_name;                             // which of its named templates ("": the default)
  bool skip_bad_lines = false;       // JSONL: warn and skip a malformed line instead of throwing
  bool add_eos = true;               // append the tokenizer's EOS to text / completion / alpaca examples
};

struct DataStats {
  size_t n_examples = 0;
  size_t n_tokens = 0;         // sum of example lengths
  size_t n_label_tokens = 0;   // labels that are not kIgnoreLabel
  size_t n_skipped_lines = 0;  // malformed JSONL lines skipped (skip_bad_lines)
};

// Splits text into documents: runs of >= min_blank_lines whitespace-only lines separate documents;
// shorter runs are kept inside (as empty lines). Each document has its leading/trailing blank lines and trailing
// newline removed; '\r' before '\n' is dropped. Empty documents are dropped.
std::vector<std::string> split_documents(std::string_view text, int min_blank_lines);

// Encodes one rendered prompt: tokenizer prefix (BOS) untrained, then each piece (text encoded with
// add_special=false, or its token id), then EOS if r.append_eos && add_eos && the tokenizer has one.
Example encode_rendered(const Tokenizer& tok, const RenderedPrompt& r, bool add_eos = true);
// A plain document: prefix (BOS) + text + EOS, every token trained (BOS too: labels are shifted
// later, so the label of BOS is never a target).
Example encode_text(const Tokenizer& tok, std::string_view text, bool add_eos = true);

// Parses one JSONL record (a line's text) into an Example. lt::Error saying what is wrong
// (without the file:line, which load_jsonl adds).
Example example_from_json(std::string_view line, const Tokenizer& tok, const DataOptions& opt);

// Loads a file or directory (see the top of this file). lt::Error naming the file (and line for
// JSONL) on bad input, and when the result holds no examples. stats (optional) is filled.
std::vector<Example> load_examples(const std::string& path, const Tokenizer& tok, const DataOptions& opt,
                                   DataStats* stats = nullptr);

// The documents-per-text-file and lines-per-JSONL loaders used by load_examples, exposed for tests.
std::vector<Example> load_text_file(const std::string& path, const Tokenizer& tok, const DataOptions& opt);
std::vector<Example> load_jsonl_file(const std::string& path, const Tokenizer& tok, const DataOptions& opt,
                                     size_t* n_skipped = nullptr);

}  // namespace lt

// libFuzzer harness: a JSONL dataset through load_jsonl_file (a path: the bytes go through a
// memfd) with the small in-memory tokenizer. The input's length picks the chat template and
// whether bad lines are skipped, so every template sees every record shape.
#include "core/error.h"
#include "fuzz_common.h"
#include "train/data.h"

namespace lt::fuzz {

void jsonl_data(std::string_view bytes) {
  static const ChatTemplate kTemplates[] = {ChatTemplate::ChatML, ChatTemplate::Llama3, ChatTemplate::Llama2,
                                            ChatTemplate::Alpaca};
  DataOptions opt;
  opt.chat_template = kTemplates[bytes.size() % 4];
  opt.add_eos = bytes.size() % 8 < 4;
  std::vector<Example> ex = load_jsonl_file(bytes_path(bytes), small_tokenizer(), opt);
  for (const Example& e : ex) LT_ASSERT(e.ids.size() == e.labels.size());
}

}  // namespace lt::fuzz

LT_FUZZ_ENTRY(lt::fuzz::jsonl_data)

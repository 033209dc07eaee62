// libFuzzer harness: a chat template's source (a model's tokenizer_config.json chat_template or
// chat_template.jinja) parsed by the native Jinja engine, then rendered against a fixed
// conversation with tools, with and without the generation prompt, and cut into assistant
// segments as training does.
#include <nlohmann/json.hpp>

#include "fuzz_common.h"
#include "tokenizer/hf_chat_template.h"
#include "tokenizer/jinja/ops.h"

namespace lt::fuzz {

void chat_template(std::string_view bytes) {
  // each input renders nine times, character by character in places (repr, escapes), and a loop
  // iteration costs ~20 us in the instrumented build: 1 MiB texts, 64 Ki items and 8 Ki steps keep
  // an input near a second, under the 10 s timeout, and are far above what a real chat template
  // makes or runs here (a few hundred steps). Put back on return: the test binary replays this
  // harness among the other tests.
  struct Lowered {
    const jinja::Limits saved = jinja::limits();
    Lowered() { jinja::set_limits({.made = 1 << 16, .text = 1 << 20, .steps = 1 << 13}); }
    ~Lowered() { jinja::set_limits(saved); }
  } lowered;
  static const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi {{ x }} é 😀"},
    {"role": "assistant", "content": "Hello!", "reasoning_content": "think"},
    {"role": "user", "content": [{"type": "text", "text": "parts"}]},
    {"role": "assistant", "content": null, "tool_calls": [{"type": "function", "id": "abcdefghi",
      "function": {"name": "f", "arguments": {"a": 1, "b": [true, null, 2.5]}}}]},
    {"role": "tool", "content": "{\"r\": 1}", "tool_call_id": "abcdefghi"},
    {"role": "assistant", "content": "Done."}])");
  static const nlohmann::ordered_json tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function":
    {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}])");
  HfChatTemplate t({{"default", std::string(bytes)}}, "fuzz", {{"bos_token", "<s>"}, {"eos_token", "</s>"}});
  ChatRenderOptions o;
  o.tools = tools;
  (void)t.apply(messages, o);
  o.add_generation_prompt = true;
  o.tools = nullptr;
  (void)t.apply(messages, o);
  o.add_generation_prompt = false;
  (void)t.segments(messages, o);
}

}  // namespace lt::fuzz

LT_FUZZ_ENTRY(lt::fuzz::chat_template)

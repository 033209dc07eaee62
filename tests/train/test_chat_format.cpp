// Chat templates in training data: the built-in Jinja sources render the same text as the training
// renderers of the same name; `chat_template:` resolves to the model's own template when it has one
// (else chatml); a model template's {"messages"} record is encoded without a BOS prefix with the
// assistant turns (and only those) trained; tools in the record reach the template.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../io/io_test_util.h"
#include "core/error.h"
#include "tokenizer/builtin_chat_templates.h"
#include "tokenizer/hf_chat_template.h"
#include "train/chat_template.h"
#include "train/data.h"

namespace lt {
namespace {

using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

std::string joined(const RenderedPrompt& r, const std::string& bos, const std::string& eos) {
  std::string s;
  for (const PromptPiece& p : r.pieces) s += p.token_id < 0 ? p.text : p.token_id == 1 ? bos : eos;
  return s;
}

TEST(ChatFormat, BuiltinJinjaSourcesMatchTheTrainingRenderers) {
  const std::vector<ChatMessage> conv = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"},
                                         {"user", "2+2?"}, {"assistant", "4"}};
  ojson msgs = ojson::array();
  for (const ChatMessage& m : conv) msgs.push_back({{"role", m.role}, {"content", m.content}});
  const ojson special = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
  for (const char* name : {"chatml", "llama3", "llama2", "alpaca"}) {
    HfChatTemplate t({{"default", *builtin_chat_template(name)}}, name, special);
    RenderedPrompt r = render_chat(parse_chat_template(name), conv, /*bos_id=*/1, /*eos_id=*/2);
    EXPECT_EQ(t.apply(msgs, {}), joined(r, "<s>", "</s>")) << name;
  }
  // the generation prompt continues where the conversation's last user turn ends
  HfChatTemplate chatml({{"default", *builtin_chat_template("ChatML")}}, "chatml", special);
  ChatRenderOptions gen;
  gen.add_generation_prompt = true;
  EXPECT_EQ(chatml.apply(ojson::parse(R"([{"role":"user","content":"Hi"}])"), gen),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

class ModelTemplate : public ::testing::Test {
 protected:
  test::TempDir dir;
  std::unique_ptr<Tokenizer> tok;

  // A tokenizer folder (a byte-level BPE over single characters, <s> and </s> added) with `chat_template`.
  void make(const std::string& chat_template) {
    nlohmann::json j;
    nlohmann::json vocab = nlohmann::json::object();
    vocab["Ġ"] = 0;  // ' ' as byte-level BPE writes it
    for (int c = 33; c < 127; ++c) vocab[std::string(1, char(c))] = c - 32;
    vocab["Ċ"] = 95;  // '\n' as byte-level BPE writes it
    j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}};
    j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
    j["decoder"] = {{"type", "ByteLevel"}};
    j["added_tokens"] = nlohmann::json::array({{{"id", 96}, {"content", "<s>"}, {"special", true}},
                                               {{"id", 97}, {"content", "</s>"}, {"special", true}}});
    test::write_bytes(dir.path + "/tokenizer.json", j.dump());
    nlohmann::json cfg = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
    if (!chat_template.empty()) cfg["chat_template"] = chat_template;
    test::write_bytes(dir.path + "/tokenizer_config.json", cfg.dump());
    tok = Tokenizer::load(dir.path);
  }
};

TEST_F(ModelTemplate, AutoUsesTheModelsTemplateElseChatml) {
  make("");
  EXPECT_FALSE(tok->has_chat_template());
  ChatFormat f = resolve_chat_format("", *tok);
  EXPECT_FALSE(f.jinja);
  EXPECT_EQ(f.builtin, ChatTemplate::ChatML);
  make("{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% if m.role == 'assistant' %}{{ eos_token }}{% endif %}{% endfor %}");
  ASSERT_TRUE(tok->has_chat_template());
  EXPECT_TRUE(resolve_chat_format("auto", *tok).jinja);
  EXPECT_FALSE(resolve_chat_format("llama3", *tok).jinja);
  EXPECT_EQ(resolve_chat_format("llama3", *tok).builtin, ChatTemplate::Llama3);
  EXPECT_THROW(resolve_chat_format("tool_use", *tok), Error);  // the model has one template only
  EXPECT_THROW(check_chat_template_name("chat ml"), Error);
  check_chat_template_name("my_template.jinja");
}

TEST_F(ModelTemplate, RecordsAreTheTemplatesTextWithAssistantTurnsTrained) {
  make("{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% if m.role == 'assistant' %}{{ eos_token }}"
       "{% endif %}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
       "{% if tools %}[{{ tools | length }} tools]{% endif %}");
  DataOptions opt;
  ChatFormat f = resolve_chat_format("", *tok);
  opt.jinja = f.jinja;
  Example ex = example_from_json(
      R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"},
                       {"role": "user", "content": "ok"}, {"role": "assistant", "content": "k"}]})",
      *tok, opt);
  // "<s><user>hi<assistant>yo</s><user>ok<assistant>k</s>": one BOS (the template's), no EOS appended
  EXPECT_EQ(tok->decode(ex.ids, false), "<s><user>hi<assistant>yo</s><user>ok<assistant>k</s>");
  ASSERT_EQ(ex.ids.size(), ex.labels.size());
  std::string trained;
  for (size_t i = 0; i < ex.ids.size(); ++i)
    if (ex.labels[i] != kIgnoreLabel) trained += tok->decode(std::vector<int>{ex.ids[i]}, false);
  EXPECT_EQ(trained, "yo</s>k</s>");
  // tools in the record reach the template
  Example with_tools = example_from_json(
      R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], "tools": [{}, {}]})", *tok, opt);
  EXPECT_EQ(tok->decode(with_tools.ids, false), "<s><user>a<assistant>b</s>[2 tools]");
  // nothing to train on
  EXPECT_THROW(example_from_json(R"({"messages": [{"role": "user", "content": "a"}]})", *tok, opt), Error);
}

TEST_F(ModelTemplate, ABrokenTemplateFailsOnUseNotOnLoad) {
  make("{% for m in messages %}\n{% include 'x' %}\n{% endfor %}");
  EXPECT_EQ(tok->encode("ab", false).size(), 2u);  // the tokenizer still works
  EXPECT_TRUE(tok->has_chat_template());
  try {
    tok->chat_template();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer_config.json chat_template: line 2"), std::string::npos) << e.what();
  }
}

TEST_F(ModelTemplate, ChatTemplateJinjaFileWinsAndNamedTemplatesAreChosen) {
  make("");
  nlohmann::json cfg = {{"bos_token", "<s>"}, {"chat_template", {{{"name", "default"}, {"template", "D"}},
                                                                   {{"name", "tool_use"}, {"template", "T"}}}}};
  test::write_bytes(dir.path + "/tokenizer_config.json", cfg.dump());
  auto t = HfChatTemplate::from_folder(dir.path);
  ASSERT_TRUE(t);
  const ojson msgs = ojson::parse(R"([{"role": "user", "content": "x"}])");
  ChatRenderOptions o;
  EXPECT_EQ(t->apply(msgs, o), "D");
  o.tools = ojson::array();
  EXPECT_EQ(t->apply(msgs, o), "T");  // tools given (even empty) and a tool_use template: transformers' choice
  o.name = "default";
  EXPECT_EQ(t->apply(msgs, o), "D");
  test::write_bytes(dir.path + "/chat_template.jinja", "J{{ bos_token }}");
  EXPECT_EQ(HfChatTemplate::from_folder(dir.path)->apply(msgs, {}), "J<s>");
}

}  // namespace
}  // namespace lt

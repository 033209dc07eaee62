// Fine-tuning data loading (src/train/data.h, chat_template.h) with the real stories260K tokenizer
// (tok512.bin: BOS 1, EOS 2) and the Aesop fables file: blank-line document splitting, BOS/EOS
// and labels of text documents, the loss masks of prompt/completion, Alpaca and chat records
// (ids must equal the piece-by-piece encoding exactly), and the errors for malformed or empty data.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "train/chat_template.h"
#include "train/data.h"
#include "train/data_loader.h"

namespace {

namespace fs = std::filesystem;
using lt::kIgnoreLabel;

const std::string kTok512 = std::string(LT_SHARED_DIR) + "/models/stories260K/tok512.bin";
const std::string kAesop = std::string(LT_SHARED_DIR) + "/data/aesop_fables/aesop_fables.txt";

const lt::Tokenizer& tok() {
  static std::unique_ptr<lt::Tokenizer> t = lt::Tokenizer::load(kTok512);
  return *t;
}

fs::path temp_dir() {
  fs::path d = fs::temp_directory_path() / ("lt_data_test_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

std::string write_temp(const std::string& name, const std::string& bytes) {
  fs::path p = temp_dir() / name;
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
  return p.string();
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const lt::Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::vector<int> cat(std::initializer_list<std::vector<int>> parts) {
  std::vector<int> v;
  for (const auto& p : parts) v.insert(v.end(), p.begin(), p.end());
  return v;
}

std::vector<int> enc(const std::string& s) { return tok().encode(s, false); }

// The maximal runs of trained tokens (labels != ignore), as id lists.
std::vector<std::vector<int>> trained_runs(const lt::Example& e) {
  std::vector<std::vector<int>> runs;
  bool in = false;
  for (size_t i = 0; i < e.ids.size(); ++i) {
    if (e.labels[i] == kIgnoreLabel) {
      in = false;
      continue;
    }
    EXPECT_EQ(e.labels[i], e.ids[i]) << "a trained label must be its own id (unshifted)";
    if (!in) runs.emplace_back();
    runs.back().push_back(e.ids[i]);
    in = true;
  }
  return runs;
}

lt::Example from_json(const std::string& line, lt::ChatTemplate t = lt::ChatTemplate::ChatML) {
  lt::DataOptions opt;
  opt.chat_template = t;
  return lt::example_from_json(line, tok(), opt);
}

TEST(TrainDataText, SplitDocumentsHonoursMinBlankLines) {
  std::string text = "\n\nA1\nA2\n\nB1\n \t\n\n\nC1\r\n\r\nC2\n\n";
  EXPECT_EQ(lt::split_documents(text, 1), (std::vector<std::string>{"A1\nA2", "B1", "C1", "C2"}));
  EXPECT_EQ(lt::split_documents(text, 2), (std::vector<std::string>{"A1\nA2\n\nB1", "C1\n\nC2"}));
  EXPECT_EQ(lt::split_documents(text, 3), (std::vector<std::string>{"A1\nA2\n\nB1", "C1\n\nC2"}));
  // A run shorter than min_blank_lines stays inside, whitespace-only lines kept as empty lines.
  EXPECT_EQ(lt::split_documents(text, 4), (std::vector<std::string>{"A1\nA2\n\nB1\n\n\n\nC1\n\nC2"}));
  EXPECT_TRUE(lt::split_documents(" \n\n\t\n", 1).empty());
  EXPECT_NE(error_of([] { lt::split_documents("x", 0); }).find("min_blank_lines"), std::string::npos);
}

TEST(TrainDataText, AesopFablesOnePerDocumentWithTitle) {
  lt::DataOptions opt;
  opt.min_blank_lines = 2;
  lt::DataStats st;
  std::vector<lt::Example> ex = lt::load_examples(kAesop, tok(), opt, &st);
  ASSERT_GT(ex.size(), 250u);
  EXPECT_EQ(st.n_examples, ex.size());

  std::ifstream f(kAesop);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::string> docs = lt::split_documents(text, 2);
  ASSERT_EQ(docs.size(), ex.size());
  EXPECT_EQ(docs[0].rfind("AESOP'S FABLES", 0), 0u);
  EXPECT_EQ(docs[1].rfind("The Wolf And The Lamb\n\nWOLF, meeting", 0), 0u);
  EXPECT_EQ(docs.back().rfind("The Frogs' Complaint Against the Sun\n\n", 0), 0u);
  // Each fable opens with its title line followed by one blank line; a fable is never cut at that
  // blank line (min_blank_lines = 1 would). Two stray morals in the file stand alone.
  int titled = 0;
  for (size_t i = 1; i < docs.size(); ++i) {
    size_t nl = docs[i].find("\n\n");
    if (nl == std::string::npos) continue;
    std::string title = docs[i].substr(0, nl);
    if (title.find('\n') == std::string::npos && title.size() < 80 && title.back() != '.') ++titled;
  }
  EXPECT_GE(titled, static_cast<int>(docs.size()) - 4);
  EXPECT_GT(lt::split_documents(text, 1).size(), 2 * docs.size() - 10);

  size_t tokens = 0;
  for (size_t i = 0; i < ex.size(); ++i) {
    const lt::Example& e = ex[i];
    ASSERT_EQ(e.ids.size(), e.labels.size());
    ASSERT_EQ(e.ids, cat({{tok().bos_id()}, enc(docs[i]), {tok().eos_id()}})) << "document " << i;
    EXPECT_EQ(e.labels, e.ids);
    tokens += e.ids.size();
  }
  EXPECT_EQ(st.n_tokens, tokens);
  EXPECT_EQ(st.n_label_tokens, tokens);
  EXPECT_EQ(tok().decode(ex[1].ids, true).rfind("The Wolf And The Lamb\n\nWOLF", 0), 0u);
}

// End to end on real data: packed batches of the fables. Within a segment every label is the next
// token (text: loss on all); the token before a document's EOS predicts EOS, and EOS itself (the
// document's last token) predicts nothing.
TEST(TrainDataText, AesopPackedBatchesShiftLabels) {
  lt::DataOptions opt;
  opt.min_blank_lines = 2;
  std::vector<lt::Example> ex = lt::load_examples(kAesop, tok(), opt);
  lt::DataSplit split = lt::split_train_eval(ex, 0.1, 1234);
  const int B = 4, T = 128;
  lt::DataLoader dl(split.train, B, T, true, 1234);
  lt::Batch b;
  size_t batches = 0, eos_seen = 0, label_tokens = 0;
  while (dl.next(b)) {
    ++batches;
    for (int i = 0; i < B * T; ++i) {
      bool same_segment_next = (i + 1) % T != 0 && b.doc_start[i + 1] == b.doc_start[i];
      if (b.tokens[i] == tok().eos_id()) {
        ++eos_seen;
        EXPECT_EQ(b.labels[i], kIgnoreLabel);
        if ((i + 1) % T != 0) {
          EXPECT_TRUE(b.tokens[i + 1] == tok().bos_id() || b.tokens[i + 1] == 0);
        }
      } else if (same_segment_next) {
        ASSERT_EQ(b.labels[i], b.tokens[i + 1]) << "batch " << batches << " token " << i;
        EXPECT_EQ(b.positions[i + 1], b.positions[i] + 1);
      }
      if (b.tokens[i] == tok().bos_id()) {
        EXPECT_EQ(b.positions[i], 0);
      }
    }
    label_tokens += b.n_label_tokens;
  }
  EXPECT_EQ(batches, dl.batches_per_epoch());
  EXPECT_EQ(eos_seen, split.train.size());
  // Every token but each document's last one is a target.
  EXPECT_EQ(label_tokens, dl.total_tokens() - split.train.size());
}

TEST(TrainDataText, WholeFileAndDirectory) {
  std::string a = write_temp("dir/a.txt", "alpha one\n\nalpha two\n");
  write_temp("dir/b.txt", "beta\n");
  write_temp("dir/ignored.bin", "zzz");
  lt::DataOptions opt;
  EXPECT_EQ(lt::load_examples(a, tok(), opt).size(), 2u);
  opt.doc_separator = lt::parse_doc_separator("file");
  std::vector<lt::Example> one = lt::load_examples(a, tok(), opt);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].ids, cat({{1}, enc("alpha one\n\nalpha two"), {2}}));
  std::vector<lt::Example> dir = lt::load_examples((temp_dir() / "dir").string(), tok(), lt::DataOptions{});
  ASSERT_EQ(dir.size(), 2u);  // one document per file, sorted by name
  EXPECT_EQ(dir[0].ids, one[0].ids);
  EXPECT_EQ(dir[1].ids, cat({{1}, enc("beta"), {2}}));
  EXPECT_NE(error_of([] { lt::parse_doc_separator("lines"); }).find("blank_line or file"), std::string::npos);
}

TEST(TrainDataJsonl, PromptCompletionMasksPrompt) {
  lt::Example e = from_json(R"({"prompt": "Q: What is 2+2?\nA:", "completion": " four"})");
  std::vector<int> p = enc("Q: What is 2+2?\nA:"), c = enc(" four");
  ASSERT_EQ(e.ids, cat({{1}, p, c, {2}}));
  for (size_t i = 0; i < e.ids.size(); ++i) {
    bool trained = i >= 1 + p.size();  // completion tokens and EOS
    EXPECT_EQ(e.labels[i], trained ? e.ids[i] : kIgnoreLabel) << i;
  }
  lt::Example t = from_json(R"({"text": "Once upon a time"})");
  EXPECT_EQ(t.ids, cat({{1}, enc("Once upon a time"), {2}}));
  EXPECT_EQ(t.labels, t.ids);
}

TEST(TrainDataJsonl, AlpacaTemplateMasksInstruction) {
  lt::Example e = from_json(R"({"instruction": "Name a color.", "input": "", "output": "Blue."})");
  std::string prompt =
      "Below is an instruction that describes a task. Write a response that appropriately completes the request.\n\n"
      "### Instruction:\nName a color.\n\n### Response:\n";
  ASSERT_EQ(e.ids, cat({{1}, enc(prompt), enc("Blue."), {2}}));
  std::vector<std::vector<int>> runs = trained_runs(e);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0], cat({enc("Blue."), {2}}));

  lt::Example w = from_json(R"({"instruction": "Add.", "input": "2 and 3", "output": "5"})");
  std::string wtext = tok().decode(w.ids, true);
  EXPECT_NE(wtext.find("paired with an input"), std::string::npos);
  EXPECT_NE(wtext.find("### Input:\n2 and 3\n\n### Response:\n"), std::string::npos);
  EXPECT_EQ(trained_runs(w).at(0), cat({enc("5"), {2}}));
}

TEST(TrainDataJsonl, ChatMLTrainsOnlyAssistantContent) {
  lt::Example e = from_json(R"({"messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Hi there"},
      {"role": "assistant", "content": "Hello!"},
      {"role": "user", "content": "Bye"},
      {"role": "assistant", "content": "Goodbye."}]})");
  ASSERT_EQ(e.ids.size(), e.labels.size());
  std::vector<int> expect = cat({{1},
                                 enc("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n"
                                     "<|im_start|>assistant\n"),
                                 enc("Hello!<|im_end|>"),
                                 enc("\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n"),
                                 enc("Goodbye.<|im_end|>")});
  EXPECT_EQ(e.ids, expect);
  std::vector<std::vector<int>> runs = trained_runs(e);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0], enc("Hello!<|im_end|>"));
  EXPECT_EQ(runs[1], enc("Goodbye.<|im_end|>"));
}

TEST(TrainDataJsonl, OtherChatTemplates) {
  std::string conv = R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"},
                                      {"role": "user", "content": "Again"}, {"role": "assistant", "content": "Sure"}]})";
  lt::Example l2 = from_json(conv, lt::parse_chat_template("llama2"));
  EXPECT_EQ(l2.ids, cat({{1}, enc("[INST] Hi [/INST]"), enc(" Yo "), {2}, {1}, enc("[INST] Again [/INST]"),
                         enc(" Sure "), {2}}));
  std::vector<std::vector<int>> r2 = trained_runs(l2);
  ASSERT_EQ(r2.size(), 2u);
  EXPECT_EQ(r2[1], cat({enc(" Sure "), {2}}));

  lt::Example l3 = from_json(conv, lt::parse_chat_template("Llama-3"));
  std::vector<std::vector<int>> r3 = trained_runs(l3);
  ASSERT_EQ(r3.size(), 2u);
  EXPECT_EQ(r3[0], enc("Yo<|eot_id|>"));
  EXPECT_NE(tok().decode(l3.ids, true).find("<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"),
            std::string::npos);

  lt::Example al = from_json(conv, lt::ChatTemplate::Alpaca);
  std::vector<std::vector<int>> ra = trained_runs(al);
  ASSERT_EQ(ra.size(), 2u);
  EXPECT_EQ(ra[0], cat({enc("Yo"), {2}}));

  // Templates that need alternation reject two user turns in a row.
  std::string bad = R"({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"},
                                     {"role": "assistant", "content": "c"}]})";
  EXPECT_NE(error_of([&] { from_json(bad, lt::ChatTemplate::Llama2); }).find("alternate"), std::string::npos);
  EXPECT_NE(error_of([] { lt::parse_chat_template("vicuna"); }).find("chatml"), std::string::npos);
}

TEST(TrainDataJsonl, MalformedLineNamesFileAndLine) {
  std::string good = R"({"text": "fine"})";
  std::string path = write_temp("bad.jsonl", good + "\n\n" + R"({"text": "unterminated)" + "\n" + good + "\n");
  std::string msg = error_of([&] { lt::load_examples(path, tok(), lt::DataOptions{}); });
  EXPECT_NE(msg.find(path + ":3:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("malformed JSON"), std::string::npos) << msg;

  std::string p2 = write_temp("bad2.jsonl", good + "\n" + R"({"prompt": 5, "completion": "x"})" + "\n");
  std::string m2 = error_of([&] { lt::load_examples(p2, tok(), lt::DataOptions{}); });
  EXPECT_NE(m2.find(p2 + ":2:"), std::string::npos) << m2;
  EXPECT_NE(m2.find("\"prompt\" must be a string"), std::string::npos) << m2;

  std::string p3 = write_temp("bad3.jsonl", R"({"question": "x"})" "\n");
  std::string m3 = error_of([&] { lt::load_examples(p3, tok(), lt::DataOptions{}); });
  EXPECT_NE(m3.find(p3 + ":1:"), std::string::npos) << m3;
  EXPECT_NE(m3.find("question"), std::string::npos) << m3;

  std::string p4 = write_temp("bad4.jsonl", R"({"messages": [{"role": "wizard", "content": "x"}]})" "\n");
  EXPECT_NE(error_of([&] { lt::load_examples(p4, tok(), lt::DataOptions{}); }).find("wizard"), std::string::npos);
  std::string p5 = write_temp("bad5.jsonl", R"({"messages": [{"role": "user", "content": "x"}]})" "\n");
  EXPECT_NE(error_of([&] { lt::load_examples(p5, tok(), lt::DataOptions{}); }).find("no assistant"),
            std::string::npos);
}

TEST(TrainDataJsonl, SkipBadLinesCounts) {
  std::string path = write_temp("skip.jsonl", std::string(R"({"text": "one"})") + "\n" + "not json\n" +
                                                  R"({"prompt": "p", "completion": "c"})" + "\n" + "[1, 2]\n" +
                                                  R"({"instruction": "i", "output": "o"})" + "\n");
  lt::DataOptions opt;
  opt.skip_bad_lines = true;
  lt::DataStats st;
  std::vector<lt::Example> ex = lt::load_examples(path, tok(), opt, &st);
  EXPECT_EQ(ex.size(), 3u);
  EXPECT_EQ(st.n_examples, 3u);
  EXPECT_EQ(st.n_skipped_lines, 2u);
}

TEST(TrainDataJsonl, EmptyDatasetIsAnError) {
  std::string empty = write_temp("empty.jsonl", "\n  \n");
  EXPECT_NE(error_of([&] { lt::load_examples(empty, tok(), lt::DataOptions{}); }).find("no examples"),
            std::string::npos);
  std::string blank = write_temp("empty.txt", "\n\n\n");
  EXPECT_NE(error_of([&] { lt::load_examples(blank, tok(), lt::DataOptions{}); }).find("no examples"),
            std::string::npos);
  std::string allbad = write_temp("allbad.jsonl", "x\ny\n");
  lt::DataOptions opt;
  opt.skip_bad_lines = true;
  EXPECT_NE(error_of([&] { lt::load_examples(allbad, tok(), opt); }).find("malformed"), std::string::npos);
  EXPECT_NE(error_of([&] { lt::load_examples("/nonexistent/x.jsonl", tok(), opt); }).find("does not exist"),
            std::string::npos);
  std::string csv = write_temp("x.csv", "a,b\n");
  EXPECT_NE(error_of([&] { lt::load_examples(csv, tok(), opt); }).find("unsupported extension"), std::string::npos);
}

}  // namespace

// `leantune demo` (api/demo.h): the fine-tune a newcomer judges at a glance, and the helpers both
// demo jobs share.
#include "api/demo.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fmt/format.h>

#include "api/run_training.h"
#include "core/error.h"
#include "infer/generate.h"
#include "kernels/ops.h"
#include "model/llama_model.h"
#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;

namespace lt {

TrainConfig demo_train_config(const std::string& model, const std::string& tokenizer, const std::string& data,
                              const fs::path& out, int threads) {
  TrainConfig c;
  c.base_model = model;
  c.tokenizer = tokenizer;
  c.datasets = {{data}};
  c.val_set_size = 0.05;
  c.output_dir = out.string();
  c.threads = threads;
  c.logging_steps = 25;
  c.eval_batches = 4;
  c.source = "demo";
  c.overwrite_output_dir = true;  // the demo's own folders: a second demo replaces the first one's runs
  return c;
}

std::vector<std::string> demo_samples(const std::string& model, const std::string& tokenizer, const std::string& adapter,
                                      const std::vector<std::string>& prompts, int max_new,
                                      const std::vector<std::string>& stop, float repetition_penalty) {
  auto tok = Tokenizer::load(tokenizer);
  auto m = LlamaModel::load(model, {}, ops_cpu());
  if (!adapter.empty()) m->merge_adapter(adapter);
  std::vector<std::string> out;
  for (const auto& p : prompts) {
    GenerateOptions g;
    g.max_new_tokens = max_new;
    g.sampler.temperature = 0;
    g.sampler.repetition_penalty = repetition_penalty;
    g.stop = stop;
    out.push_back(generate(*m, *tok, p, g, [](const std::string&) {}).text);
  }
  return out;
}

namespace {

struct FineTuneInputs {
  std::string model, tokenizer, data, prompt, what;  // what: a line saying what is tuned on what
};

// --model/--data as given, or stories260K and Aesop's fables from the first shared folder that has
// both; lt::Error naming every folder looked in and the other ways to run the demo otherwise.
FineTuneInputs fine_tune_inputs(const DemoOptions& o) {
  FineTuneInputs in;
  if (!o.model.empty() || !o.data.empty()) {
    LT_CHECK(!o.model.empty() && !o.data.empty(), "demo: --model and --data go together (a model and a text file "
             "to fine-tune it on); without both the demo uses stories260K and Aesop's fables from the shared folder");
    in.model = o.model;
    in.tokenizer = o.tokenizer.empty() ? (fs::is_directory(o.model) ? o.model : fs::path(o.model).parent_path().string())
                                       : o.tokenizer;
    in.data = o.data;
    in.prompt = o.prompt.empty() ? "Once upon a time" : o.prompt;
    in.what = fmt::format("{} LoRA-tuned on {}", o.model, o.data);
    return in;
  }
  std::vector<std::string> roots;
  if (const char* env = std::getenv("LEANTUNE_SHARED"); env && *env) roots.push_back(env);
  roots.insert(roots.end(), {"shared", "../shared"});
  for (const auto& r : roots) {
    fs::path m = fs::path(r) / "models/stories260K", d = fs::path(r) / "data/aesop_fables/aesop_fables.txt";
    if (fs::exists(m / "stories260K.bin") && fs::exists(m / "tok512.bin") && fs::exists(d)) {
      in.model = (m / "stories260K.bin").string();
      in.tokenizer = (m / "tok512.bin").string();
      in.data = d.string();
      in.prompt = o.prompt.empty() ? "One day a hungry Fox" : o.prompt;
      in.what = "stories260K (a 260K-parameter Llama that has read only children's stories) LoRA-tuned on Aesop's fables";
      return in;
    }
  }
  std::string looked;
  for (const auto& r : roots) looked += fmt::format("\n  {}/models/stories260K/{{stories260K,tok512}}.bin and {}/data/aesop_fables/aesop_fables.txt", r, r);
  fail("demo: the default demo fine-tunes stories260K on Aesop's fables, and did not find them; it looked for{}\n"
       "Set LEANTUNE_SHARED to the folder holding models/ and data/, give --model M --data FILE, or run "
       "`leantune demo --synthetic`, which needs no files", looked);
}

// The sample under its label, its end cut where the token limit left it: after the last sentence
// that ends in its second half, else after its last whole word; further lines indented under the
// first (blank lines dropped).
void print_sample(const char* label, const std::string& prompt, const std::string& text) {
  std::string s = prompt + text, out;
  const size_t sentence = s.find_last_of(".!?");
  if (sentence != std::string::npos && sentence >= prompt.size() && sentence >= s.size() / 2) {
    s.resize(sentence + 1 + (sentence + 1 < s.size() && s[sentence + 1] == '"'));  // a closing quote stays
  } else if (const size_t space = s.find_last_of(" \n"); space != std::string::npos && space >= prompt.size()) {
    s.resize(space);
  }
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\n') {
      out += s[i];
    } else if (!out.empty() && out.back() != '\n') {
      out += '\n';
    }
  }
  while (!out.empty() && out.back() == '\n') out.pop_back();
  std::string indented;
  for (char c : out) indented += c == '\n' ? std::string("\n           ") : std::string(1, c);
  fmt::print("  {:<8} {}\n", label, indented);
}

}  // namespace

void run_demo(const DemoOptions& o) {
  if (o.synthetic) return run_synthetic_demo(o);
  const FineTuneInputs in = fine_tune_inputs(o);
  const fs::path dir = o.dir;
  fs::create_directories(dir);
  const int steps = o.lora_steps > 0 ? o.lora_steps : 40;
  const std::vector<std::string> prompts = {in.prompt};
  constexpr int kSampleTokens = 60;
  constexpr float kPenalty = 1.2f;  // greedy decoding of a tiny model loops without it
  fmt::print("leantune demo: {}.\n{} LoRA steps; 5% of the text is held out to measure the loss before and after. "
             "(`leantune demo --synthetic`: a tiny model trained from scratch instead)\n\n", in.what, steps);
  const std::string before = demo_samples(in.model, in.tokenizer, "", prompts, kSampleTokens, {}, kPenalty)[0];
  print_sample("before:", in.prompt, before);
  fmt::print("\n");

  TrainConfig c = demo_train_config(in.model, in.tokenizer, in.data, dir / "lora", o.threads);
  c.method = Method::Lora;
  c.lora.r = 16;
  c.lora.alpha = 32;
  c.lora.target_modules = {"all-linear"};
  c.max_steps = steps;
  c.learning_rate = 4e-3;
  c.warmup_steps = std::min(5, steps);  // warmup_steps <= max_steps (train_config.h)
  c.sequence_len = 128;
  c.micro_batch_size = 8;
  c.logging_steps = std::max(1, steps / 4);
  for (auto& d : c.datasets) d.min_blank_lines = 2;  // Aesop: fables apart by 4 blank lines, title and text by 1
  const auto t0 = std::chrono::steady_clock::now();
  const TrainResult r = run_training(c);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const fs::path adapter = dir / "lora" / "adapter";
  const std::string after = demo_samples(in.model, in.tokenizer, adapter.string(), prompts, kSampleTokens, {}, kPenalty)[0];

  fmt::print("\n== what {} LoRA steps changed ({:.0f} s of training)\n", r.steps, seconds);
  fmt::print("  held-out loss {:.3f} -> {:.3f}   (perplexity {:.1f} -> {:.1f}; lower: the held-out text is better predicted)\n",
             r.first_eval_loss, r.last_eval_loss, std::exp(r.first_eval_loss), std::exp(r.last_eval_loss));
  fmt::print("  the same prompt, greedy decoding, before and after:\n");
  print_sample("before:", in.prompt, before);
  print_sample("after:", in.prompt, after);
  fmt::print("  report:  {}   (loss curves, memory planned vs measured; open it in a browser)\n"
             "  adapter: {}   (PEFT format: `leantune generate --model {} --adapter {} ...`)\n",
             (dir / "lora" / "report.html").string(), adapter.string(), in.model, adapter.string());
}

}  // namespace lt

// `leantune logits`: a test and debugging aid. Prefills the given token ids, then feeds the
// `--decode` ids one at a time through the KV cache, and writes the last-token logits after the
// prefill and after each decode step as raw little-endian f32 rows ((1 + n_decode) × V) to --out.
#include <string>
#include <vector>

#include "commands.h"
#include "flag_check.h"
#include "leantune/logits.h"
#include "leantune/model.h"

namespace lt::cli {

void add_logits_command(CLI::App& app) {
  struct Args {
    std::string model, prompt, decode, out, adapter, weights;
    int threads = 0, context = 0, block = 0;
    bool reference = false, llama_cpp = false;
  };
  auto a = std::make_shared<Args>();
  auto* c = app.add_subcommand("logits", "Write next-token logits for given token ids (testing aid)");
  c->add_option("--model,-m", a->model, "model path")->required();
  c->add_option("--adapter", a->adapter, "PEFT LoRA adapter folder, merged into the weights");
  c->add_option("--ids", a->prompt, "comma-separated prompt token ids")->required();
  c->add_option("--decode", a->decode, "comma-separated ids fed one at a time after the prompt");
  c->add_option("--out,-o", a->out, "output file (raw f32)")->required();
  c->add_option("--threads,-t", a->threads, "threads");
  c->add_option("--context", a->context, "KV cache positions");
  c->add_option("--prefill-block", a->block, "prefill block size");
  c->add_flag("--reference", a->reference, "use the scalar reference kernels");
  c->add_flag("--llama-cpp-numerics", a->llama_cpp, "compute as llama.cpp's CPU backend does (q8_0 / q4_0 weights; "
              "--prefill-block must be llama.cpp's batch size, 512 by default)");
  c->add_option("--weights", a->weights, "weights (and lm_head) in memory, as `generate --weights` (default f32)");
  c->callback([a] {
    auto prompt = parse_ids(a->prompt, "--ids");
    auto dec = parse_ids(a->decode, "--decode");
    if (prompt.empty()) fail("--ids: no token ids given");
    leantune::ModelOptions mo;
    mo.threads = a->threads;
    mo.adapter = a->adapter;
    if (!a->weights.empty()) mo.weights = leantune::parse_weights(a->weights);
    if (a->reference && a->llama_cpp)
      fail("logits: --reference and --llama-cpp-numerics choose different kernels; give one");
    mo.kernels = a->reference   ? leantune::Kernels::Reference
                 : a->llama_cpp ? leantune::Kernels::LlamaCpp
                                : leantune::Kernels::Fast;
    leantune::Model model(a->model, mo);
    leantune::write_logits_file(a->out, model, prompt, dec, {.context = a->context, .prefill_block = a->block});
  });
}

}  // namespace lt::cli

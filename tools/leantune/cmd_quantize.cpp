// `leantune quantize --model M --type nf4|fp4|int8|int4|int4_asym|q8_0|q4_0 [--double-quant] [--blocksize 64] --out DIR`:
// writes a quantized model folder (layout: src/io/quant_model.cpp) that `leantune train` with
// base_model: DIR loads without re-quantizing (LoRA on the quantized base).
#include <memory>
#include <string>

#include "commands.h"
#include "flag_check.h"
#include "leantune/quantize.h"

namespace lt::cli {

void add_quantize_command(CLI::App& app) {
  struct Args { std::string model, type = "nf4", out; int blocksize = 64; bool dq = false; };
  auto a = std::make_shared<Args>();
  auto* c = app.add_subcommand("quantize", "Write a model with its linear weights quantized (nf4, fp4, int8, int4, "
                               "int4_asym)");
  c->add_option("--model,-m", a->model, "model: HF folder, .safetensors, or llama2.c .bin")->required();
  c->add_option("--type", a->type, "nf4, fp4, int8, int4 (q4_0's grid), int4_asym (q4_1's), q8_0 or q4_0 (default nf4)");
  c->add_flag("--double-quant", a->dq, "nf4/fp4: quantize the absmax values to 8 bits (QLoRA's double quantization)");
  c->add_option("--blocksize", a->blocksize, "4-bit block size: a power of two from 64 (int4: 32) to 4096 "
                 "(default 64)");
  c->add_option("--out,-o", a->out, "output folder")->required();
  c->callback([a] {
    leantune::QuantizeOptions o{leantune::parse_quantization(a->type), a->blocksize, a->dq};
    if (o.type == leantune::Quantization::Int8) {
      if (a->blocksize != 64) fail("--blocksize applies to nf4 and fp4; int8 keeps one scale per row");
      o.blocksize = 64;
    }
    try {
      leantune::check_quantize_options(o);
    } catch (const leantune::Error& e) {
      fail("quantize --type {} --blocksize {}{}: {}", a->type, a->blocksize, a->dq ? " --double-quant" : "", e.what());
    }
    leantune::quantize_model(a->model, o, a->out);
  });
}

}  // namespace lt::cli

// `leantune quant-dump --in x.safetensors [--tensor NAME] --type nf4|fp4|int8 [--blocksize 64]
// [--double-quant] [--mean-threads N] --out q.safetensors`: quantizes one f32/f16/bf16 tensor and
// writes every part of the result (see include/leantune/quant_dump.h) so tests can compare them
// with bitsandbytes.
#include <fmt/format.h>

#include <memory>

#include "commands.h"
#include "leantune/quant_dump.h"

namespace lt::cli {

void add_quant_command(CLI::App& app) {
  struct Args { std::string in, type = "nf4", out; leantune::QuantDumpOptions o; };
  auto a = std::make_shared<Args>();
  auto* c = app.add_subcommand("quant-dump", "Quantize one tensor (nf4/fp4/int8) and write all its parts");
  c->add_option("--in", a->in, "input .safetensors")->required();
  c->add_option("--tensor", a->o.tensor, "tensor name (default: the file's only tensor)");
  c->add_option("--type", a->type, "nf4, fp4 or int8");
  c->add_option("--blocksize", a->o.blocksize, "4-bit block size: a power of two from 64 to 4096");
  c->add_flag("--double-quant", a->o.double_quant, "quantize the absmax values to 8 bits (4-bit types)");
  c->add_option("--mean-threads", a->o.mean_threads, "torch thread count whose mean the double-quant offset reproduces");
  c->add_option("--out", a->out, "output .safetensors")->required();
  c->callback([a] {
    leantune::QuantDumpOptions o = a->o;
    o.type = leantune::parse_quantization(a->type);
    const leantune::QuantDumpResult r = leantune::quant_dump(a->in, a->out, o);
    fmt::print("{}: {} {} x {} -> {} ({} bytes)\n", r.tensor, leantune::quantization_name(o.type), r.rows, r.cols,
               a->out, r.storage_bytes);
  });
}

}  // namespace lt::cli

// quantize.h over io/quant_model.h.
#include "leantune/quantize.h"

#include "api/access.h"
#include "api/guard.h"
#include "io/quant_model.h"
#include "quant/quant_tensor.h"

namespace leantune {

namespace {

lt::QuantSpec engine_spec(const QuantizeOptions& o) {
  // None is not a type to quantize to: the engine's parser words it
  const lt::Quantization t = detail::engine_quantization(o.type);
  const lt::QuantType type = t ? *t : lt::parse_quant_type(quantization_name(o.type));
  return {type, lt::is_ggml_block(type) ? 32 : o.blocksize, o.double_quant};  // q8_0: blocks of 32 only
}

}  // namespace

void check_quantize_options(const QuantizeOptions& options) {
  detail::guard([&] { lt::check_quant_spec(engine_spec(options)); });
}

void quantize_model(const std::string& model, const QuantizeOptions& options, const std::string& out_dir) {
  detail::guard([&] { lt::quantize_model(model, engine_spec(options), out_dir); });
}

}  // namespace leantune

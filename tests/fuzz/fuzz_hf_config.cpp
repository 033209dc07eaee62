// libFuzzer harness: a Hugging Face config.json through parse_hf_config, then the inference memory
// plan of the config it accepts (what `leantune plan` and every load do next).
#include "fuzz_common.h"
#include "io/hf_model.h"
#include "model/llama_model.h"

namespace lt::fuzz {

void hf_config(std::string_view bytes) {
  ModelConfig c = parse_hf_config(std::string(bytes), "config.json");
  validate_config(c, "config.json");
  InferenceOptions o;
  o.context = 16;
  resolve_inference_options(c, o);
  (void)plan_inference(c, o);
}

}  // namespace lt::fuzz

LT_FUZZ_ENTRY(lt::fuzz::hf_config)

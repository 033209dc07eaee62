// libFuzzer harness: a PEFT adapter_config.json through parse_peft_adapter_config, and the text
// save_peft_adapter would write back for the config it accepts.
#include "fuzz_common.h"
#include "io/peft_adapter.h"

namespace lt::fuzz {

void adapter_config(std::string_view bytes) {
  std::string base;
  LoraConfig c = parse_peft_adapter_config(std::string(bytes), "adapter_config.json", &base);
  (void)peft_adapter_config_json(c, base);
}

}  // namespace lt::fuzz

LT_FUZZ_ENTRY(lt::fuzz::adapter_config)

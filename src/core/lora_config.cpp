// parse_lora_init (core/lora_config.h): PEFT's init_lora_weights values this engine implements.
#include "core/lora_config.h"

#include "core/error.h"

namespace lt {

std::string parse_lora_init(const std::string& v, const std::string& where) {
  if (v == "true" || v == "True" || v == "default") return "default";
  if (v == "gaussian" || v == "pissa" || v == "olora") return v;
  const std::string p = "pissa_niter_";
  if (v.rfind(p, 0) == 0) {
    const std::string k = v.substr(p.size());
    const bool digits = !k.empty() && k.size() <= 6 && k.find_first_not_of("0123456789") == std::string::npos;
    LT_CHECK(digits, "{}: init_lora_weights '{}': the number of subspace iterations after pissa_niter_ must be a "
             "whole number (e.g. pissa_niter_4)", where, excerpt(v));
    return p + std::to_string(std::atoi(k.c_str()));
  }
  LT_CHECK(v != "false" && v != "False", "{}: init_lora_weights: false (A and B both random, so the adapter does not "
           "start at the base model) is not supported; use true, gaussian, pissa, pissa_niter_K or olora", where);
  fail("{}: init_lora_weights '{}' is not one of true (default), gaussian, pissa, pissa_niter_K, olora", where,
       excerpt(v));
}

}  // namespace lt

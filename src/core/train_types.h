// The choices a training run names — the method (LoRA or full fine-tuning) and the mixed
// precision — as types; the quantization of the frozen base is core/quant_spec.h's Quantization.
// They are parsed once, where a config key, a CLI flag or a file field is read, and printed back by
// name where the outputs (the plan, bench results, checkpoint manifests) write them.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

#include "core/quant_spec.h"  // Quantization, with the method and precision in every run's options

namespace lt {

enum class Method : uint8_t { Lora, Full };
enum class Precision : uint8_t { FP32, BF16, FP16 };
// The training attention's operands in precision bf16 (config key attention_precision): F32 keeps
// q, k, v in f32 and runs the f32 kernels; BF16 saves them in bf16 and runs the bf16 kernels
// (vdpbf16ps) where the CPU has AVX512-BF16; Auto picks (train/train_model.h, bf16_attention()).
enum class AttentionPrecision : uint8_t { Auto, F32, BF16 };

const char* method_name(Method m);        // "lora", "full"
const char* precision_name(Precision p);  // "fp32", "bf16", "fp16"
const char* attention_precision_name(AttentionPrecision p);  // "auto", "f32", "bf16"

// The value a name names, or nullopt: for readers that word their own error (config keys, files).
std::optional<Method> find_method(std::string_view name);        // "lora" | "full"
std::optional<Precision> find_precision(std::string_view name);  // "fp32" | "bf16" | "fp16"
std::optional<AttentionPrecision> find_attention_precision(std::string_view name);  // "auto" | "f32" | "bf16"

// The same, lt::Error otherwise: "method: 'x' is not one of lora, full", "precision: 'x' is not
// one of fp32, bf16, fp16", "attention_precision: 'x' is not one of auto, f32, bf16".
Method parse_method(std::string_view name);
Precision parse_precision(std::string_view name);
AttentionPrecision parse_attention_precision(std::string_view name);

}  // namespace lt

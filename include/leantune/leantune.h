// leantune: fine-tune and run Llama-family language models on the CPU. This header includes the
// whole public API; each header documents its part with a usage example at its top.
//
// Usage:
//   #include "leantune/leantune.h"
//   leantune::Model model("models/SmolLM2-135M");
//   leantune::Tokenizer tok("models/SmolLM2-135M");
//   leantune::Generator gen(model);
//   std::puts(gen.generate(tok, "The capital of France is").text.c_str());
//
// Threads: a Model and a Tokenizer are immutable and shared by any number of threads; each
// Sequence or Generator (one per request) is used by one thread at a time. Errors: every function
// throws leantune::Error with a message naming what was wrong (error.h).
#pragma once

#include "leantune/chat_template.h"    // chat templates: the model's Jinja template, built-in ones
#include "leantune/checkpoint.h"   // sharded (ZeRO) checkpoints -> adapter / model / single-process state
#include "leantune/engine.h"       // Engine: continuous batching, paged KV cache, LoRA adapters unmerged
#include "leantune/error.h"        // leantune::Error
#include "leantune/files.h"        // write_text_file: temporary file, fsync, rename
#include "leantune/gguf.h"         // GGUF export of a model or an adapter
#include "leantune/generator.h"    // Generator: sampling, streaming, one KV cache per request
#include "leantune/grad_check.h"   // testing aid: one forward + backward, gradients saved
#include "leantune/logits.h"       // testing aid: logits rows of a prefill and decode steps
#include "leantune/machine.h"      // CPU features, kernels, thread counts
#include "leantune/memory.h"       // resident memory, byte formatting
#include "leantune/merge.h"        // merge a LoRA adapter into its base model
#include "leantune/model.h"        // Model: weights loaded for inference, configs, inspection
#include "leantune/plan.h"         // memory plans, cost estimates, LoRA rank report, ZeRO plans
#include "leantune/quant_dump.h"   // testing aid: one tensor quantized, every part saved
#include "leantune/quantize.h"     // quantized model folders (NF4, FP4, int8)
#include "leantune/sequence.h"     // Sequence: one token sequence's KV cache over a Model
#include "leantune/sweep.h"        // measured LoRA sweeps: a grid of configurations, table and report
#include "leantune/tokenizer.h"    // Tokenizer: tokenizer.json and llama2.c tokenizers
#include "leantune/trainer.h"      // Trainer: training runs, bench and demo

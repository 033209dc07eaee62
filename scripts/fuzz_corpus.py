#!/usr/bin/env python3
"""Seed corpora and dictionaries for the libFuzzer harnesses (tests/fuzz/, scripts/fuzz.sh).

Usage: fuzz_corpus.py OUT_DIR [SHARED_DIR]
Writes OUT_DIR/<fuzzer>/seed_* (small valid and nearly valid inputs of each format, built here or
taken from SHARED_DIR/models/stories260K and the repository) and OUT_DIR/<fuzzer>.dict (the string
literals of the parser's sources, so mutations can splice in real keys). Needs only the Python
standard library; with the `tokenizers` package (the project's .venv) it also trains small
tokenizer.json files. Everything is small: the whole corpus is well under 1 MB.
"""
import itertools
import json
import os
import re
import struct
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIG_SEP = "\n#tokenizer_config.json\n"  # tests/fuzz/fuzz_tokenizer_json.cpp kConfigSeparator

# Sources whose string literals make each fuzzer's dictionary.
DICT_SOURCES = {
    "fuzz_safetensors": ["src/io/safetensors.cpp", "src/core/dtype.cpp"],
    "fuzz_hf_config": ["src/io/hf_model.cpp", "src/io/quant_model.cpp", "src/core/model_config.cpp"],
    "fuzz_tokenizer_json": ["src/tokenizer/tokenizer_json.cpp", "src/tokenizer/hf_pretokenize.cpp",
                            "src/tokenizer/hf_decoders.cpp", "src/tokenizer/added_tokens.cpp",
                            "src/tokenizer/bpe_model.cpp"],
    "fuzz_llama2c_model": [],
    "fuzz_llama2c_tokenizer": [],
    "fuzz_adapter_config": ["src/io/peft_adapter.cpp"],
    "fuzz_train_yaml": ["src/train/train_config.cpp"],
    "fuzz_jsonl_data": ["src/train/data.cpp", "src/train/chat_template.cpp"],
    "fuzz_trainer_state": ["src/train/trainer_state.cpp"],
    "fuzz_chat_template": ["src/tokenizer/jinja/parser.cpp", "src/tokenizer/jinja/filters.cpp",
                           "src/tokenizer/jinja/tests.cpp", "src/tokenizer/jinja/methods.cpp",
                           "src/tokenizer/jinja/globals.cpp"],
    "fuzz_openai_request": ["tools/leantune/server/openai_request.cpp", "tools/leantune/server/chat_format.cpp"],
    "fuzz_gguf": ["src/io/gguf_reader.cpp", "src/io/gguf_model.cpp", "src/io/gguf_names.cpp",
                  "src/model/model_tokenizer.cpp", "src/tokenizer/gguf_tokenizer.cpp"],
}
EXTRA_DICT = {
    "json": ['"{"', '"}"', '"["', '"]"', '":"', '","', '"null"', '"true"', '"false"', '"-1"', '"1e999"',
             '"\\"\\\\u0000\\""', '"\\"\\\\ud800\\""', '"18446744073709551616"', '"2147483648"'],
    "yaml": ['"- "', '": "', '"\\x0a  "', '"[]"', '"{}"', '"&a "', '"*a"', '"!!str "', '"~"', '"<<: "', '"|\\x0a"',
             '"0x7fffffff"', '"-2147483649"', '".nan"', '".inf"', '"1e400"'],
    # GGUF: the magic and the llama.* keys (the sources build them from "llama." + a suffix)
    "jinja": ['"{{"', '"}}"', '"{%"', '"%}"', '"{%-"', '"-%}"', '"{#"', '"#}"', '"|"', '"~"', '"**"', '"//"',
              '"loop."', '"messages"', '"message.content"', '"add_generation_prompt"', '"namespace("', '"endfor"',
              '"endif"', '"endmacro"', '"raise_exception("'],
    "gguf": ['"GGUF"', '"\\x03\\x00\\x00\\x00"', '"\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\x7f"'] +
            [f'"llama.{k}"' for k in ["context_length", "embedding_length", "block_count", "feed_forward_length",
                                      "attention.head_count", "attention.head_count_kv", "attention.key_length",
                                      "attention.value_length", "rope.dimension_count", "rope.freq_base",
                                      "attention.layer_norm_rms_epsilon", "vocab_size", "expert_count",
                                      "rope.scaling.type"]],
}


def put(out, name, data):
    out.mkdir(parents=True, exist_ok=True)
    (out / name).write_bytes(data if isinstance(data, bytes) else data.encode())


def dictionary(path, sources, extra):
    words = set(extra)
    for src in sources:
        for lit in re.findall(r'"([A-Za-z_<|][A-Za-z0-9_.:|<>/ -]{0,40})"', (REPO / src).read_text()):
            if "{}" not in lit:
                words.add('"' + lit + '"')
                words.add('"\\"' + lit + '\\""')
    path.write_text("".join(f"w{i}={w}\n" for i, w in enumerate(sorted(words))))


# ---- safetensors -----------------------------------------------------------------------------

ST_DTYPES = {"F32": ("f", 4), "F16": ("e", 2), "BF16": ("H", 2), "I32": ("i", 4), "I64": ("q", 8),
             "U8": ("B", 1), "I8": ("b", 1)}


def safetensors_bytes(tensors, metadata=None, pad=True):
    header, body = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape in tensors:
        n = 1
        for d in shape:
            n *= d
        size = ST_DTYPES[dtype][1]
        while len(body) % size:
            body += b"\0"
        data = bytes((i * 37 + 11) % 256 for i in range(n * size))
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(body), len(body) + len(data)]}
        body += data
    h = json.dumps(header).encode()
    if pad:
        h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + body


def safetensors_seeds(out):
    put(out, "seed_empty", safetensors_bytes([]))
    put(out, "seed_meta", safetensors_bytes([("w", "F32", [2, 3])], {"format": "pt", "note": "x"}))
    for i, dt in enumerate(ST_DTYPES):
        put(out, f"seed_{dt}", safetensors_bytes([("a", dt, [3]), ("b." + dt, dt, [2, 2]), ("s", dt, [])]))
    put(out, "seed_zero_dim", safetensors_bytes([("z", "F32", [0, 4]), ("y", "BF16", [1, 1, 1, 2])]))
    put(out, "seed_llama_names", safetensors_bytes(
        [("model.embed_tokens.weight", "F32", [8, 4]), ("model.layers.0.self_attn.q_proj.weight", "BF16", [4, 4]),
         ("model.norm.weight", "F16", [4]), ("lm_head.weight", "F32", [8, 4])], {"format": "pt"}))
    put(out, "seed_unpadded", safetensors_bytes([("w", "I64", [2])], pad=False))
    python_written = REPO / "tests/io/data/python_written.safetensors"
    if python_written.exists():
        put(out, "seed_python_written", python_written.read_bytes())


# ---- config.json -----------------------------------------------------------------------------

def hf_config_seeds(out):
    base = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 172, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 256,
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False, "bos_token_id": 1,
            "eos_token_id": 2, "architectures": ["LlamaForCausalLM"], "torch_dtype": "float32"}
    variants = [
        {},
        {"head_dim": 32, "tie_word_embeddings": True},
        {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                          "original_max_position_embeddings": 128}, "eos_token_id": [2, 3]},
        {"rope_scaling": {"type": "linear", "factor": 2.0}},
        {"rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}},
        {"model_type": "mistral", "sliding_window": 128},
        {"model_type": "qwen2", "use_sliding_window": False, "sliding_window": 4096, "attention_bias": True},
        {"mlp_bias": True, "attention_bias": False, "bos_token_id": None},
        {"quantization_config": {"quant_method": "leantune", "type": "nf4", "blocksize": 64, "double_quant": True}},
        {"quantization_config": {"quant_method": "leantune", "type": "int8"}},
        {"num_key_value_heads": None, "rms_norm_eps": 1e-6},
    ]
    for i, v in enumerate(variants):
        put(out, f"seed_{i}", json.dumps({**base, **v}, indent=2))


# ---- tokenizer.json --------------------------------------------------------------------------

CORPUS = ["Once upon a time, there was a little girl named Lily. She loved to play outside.",
          "café naïve résumé — «quotes» 中文 日本語 한국어 😀 👍🏽",
          "def f(x):\n    return x * 2\n\n\tindented\r\n", "Numbers: 3.14159, 2,718, 0xFF, 100%.",
          "don't I'LL we've THEY'RE it's"] * 20


def trained_tokenizers():
    try:
        from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers,
                                processors, trainers)
    except ImportError:
        return []
    out = []
    # Llama 3 style: Split regex + ByteLevel, special tokens, TemplateProcessing BOS.
    t = Tokenizer(models.BPE(ignore_merges=True))
    pat = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(pat), "isolated"),
                                               pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|im_start|>", "<|im_end|>"]
    t.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=300, special_tokens=specials,
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    t.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A $B",
                                                     special_tokens=[("<|begin_of_text|>", 0)])
    t.add_tokens([AddedToken("<extra>", special=False, normalized=False)])
    out.append(("llama3", t.to_str()))
    # GPT-2 style: ByteLevel with its own regex and add_prefix_space.
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    t.decoder = decoders.ByteLevel()
    t.post_processor = processors.ByteLevel(trim_offsets=True)
    t.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=290, special_tokens=["<|endoftext|>"],
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    out.append(("gpt2", t.to_str()))
    # Llama 2 style SentencePiece BPE: Prepend/Replace normalizer, byte fallback.
    t = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    t.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    t.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                   decoders.Strip(" ", 1, 0)])
    bytes_ = [f"<0x{b:02X}>" for b in range(256)]
    t.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"] + bytes_))
    t.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", 1)])
    out.append(("sentencepiece", t.to_str()))
    return out


def tokenizer_json_seeds(out):
    vocab = {chr(c): i for i, c in enumerate(range(33, 127))}
    vocab.update({"hi": 94, "Ġ": 95, "Ġhi": 96})
    hand = {"version": "1.0", "added_tokens": [{"id": 97, "content": "<|eot|>", "special": True, "normalized": False,
                                                "single_word": False, "lstrip": False, "rstrip": False}],
            "normalizer": {"type": "NFC"}, "pre_tokenizer": {"type": "Whitespace"},
            "post_processor": {"type": "ByteLevel", "trim_offsets": True}, "decoder": {"type": "ByteLevel"},
            "model": {"type": "BPE", "vocab": vocab, "merges": ["h i", ["Ġ", "hi"]], "dropout": None,
                      "unk_token": None, "byte_fallback": False}}
    put(out, "seed_hand", json.dumps(hand))
    for name, text in trained_tokenizers():
        put(out, f"seed_{name}", text)
        cfg = {"add_bos_token": True, "add_eos_token": name == "sentencepiece", "bos_token": "<s>",
               "eos_token": {"content": "</s>", "__type": "AddedToken"}, "model_max_length": 2048}
        put(out, f"seed_{name}_config", text + CONFIG_SEP + json.dumps(cfg))


# ---- llama2.c model and tokenizer --------------------------------------------------------------

def llama2c_model_bytes(C, F, L, NH, NKV, V, T, shared=True):
    HS = C // NH
    floats = (V * C + L * C + L * NH * HS * C + 2 * L * NKV * HS * C + L * C * NH * HS + L * C + 3 * L * F * C + C
              + 2 * T * (HS // 2) + (0 if shared else V * C))
    head = struct.pack("<7i", C, F, L, NH, NKV, V if shared else -V, T)
    return head + struct.pack(f"<{floats}f", *[((i * 7919) % 97 - 48) / 200.0 for i in range(floats)])


def llama2c_model_seeds(out, shared_dir):
    for i, args in enumerate([(8, 16, 1, 2, 1, 32, 8), (8, 24, 2, 2, 2, 16, 4), (16, 32, 1, 4, 2, 40, 16),
                              (4, 4, 1, 1, 1, 8, 2)]):
        put(out, f"seed_{i}", llama2c_model_bytes(*args))
    put(out, "seed_unshared", llama2c_model_bytes(8, 16, 1, 2, 1, 24, 8, shared=False))
    real = shared_dir / "models/stories260K/stories260K.bin"
    if real.exists():  # the real header with its file cut short (the whole file is over the 1 MB limit)
        put(out, "seed_stories260K_head", real.read_bytes()[:4096])


def llama2c_tokenizer_bytes(pieces, max_len=16):
    b = struct.pack("<i", max_len)
    for i, p in enumerate(pieces):
        raw = p.encode()
        b += struct.pack("<fi", -float(i) if i > 258 else 0.0, len(raw)) + raw
    return b


def llama2c_tokenizer_seeds(out, shared_dir):
    base = ["<unk>", "\n<s>\n", "\n</s>\n"] + [f"<0x{b:02X}>" for b in range(256)]
    put(out, "seed_bytes_only", llama2c_tokenizer_bytes(base))
    put(out, "seed_ascii", llama2c_tokenizer_bytes(base + [chr(c) for c in range(32, 127)] + ["th", " the", "é", "中"]))
    put(out, "seed_tiny", llama2c_tokenizer_bytes(["<unk>", "<s>", "</s>", " ", "a", "ab"]))
    real = shared_dir / "models/stories260K/tok512.bin"
    if real.exists():
        put(out, "seed_tok512", real.read_bytes())


# ---- GGUF ------------------------------------------------------------------------------------

def gguf_str(s):
    raw = s.encode()
    return struct.pack("<Q", len(raw)) + raw


def gguf_value(v):
    """(gguf_type, bytes) of a Python value: int -> u32 (i32 when negative), float -> f32, bool, str,
    list -> array of its first element's type (nested lists: arrays of arrays)."""
    if isinstance(v, bool):
        return 7, struct.pack("<B", v)
    if isinstance(v, int):
        return (5, struct.pack("<i", v)) if v < 0 else (4, struct.pack("<I", v))
    if isinstance(v, float):
        return 6, struct.pack("<f", v)
    if isinstance(v, str):
        return 8, gguf_str(v)
    elem = gguf_value(v[0])[0] if v else 4
    return 9, struct.pack("<IQ", elem, len(v)) + b"".join(gguf_value(x)[1] for x in v)


def gguf_bytes(kv, tensors, version=3, align=32):
    """kv: {key: value}; tensors: [(name, shape outermost first, ggml type, data bytes)]."""
    head = struct.pack("<IIQQ", 0x46554747, version, len(tensors), len(kv))
    for k, v in kv.items():
        t, raw = gguf_value(v)
        head += gguf_str(k) + struct.pack("<I", t) + raw
    body, offset = b"", 0
    for name, shape, typ, data in tensors:
        head += gguf_str(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in reversed(shape))
        head += struct.pack("<IQ", typ, offset)
        pad = (-len(data)) % align
        body += data + b"\0" * pad
        offset += len(data) + pad
    return head + b"\0" * ((-len(head)) % align) + body


GGUF_TYPES = {"f32": (0, 1, 4), "f16": (1, 1, 2), "bf16": (30, 1, 2), "q8_0": (8, 32, 34), "q4_0": (2, 32, 18)}


def gguf_tensor_data(shape, typ, seed):
    n = 1
    for d in shape:
        n *= d
    _, block, size = GGUF_TYPES[typ]
    if typ == "f32":
        return struct.pack(f"<{n}f", *[((i * 7919 + seed) % 97 - 48) / 200.0 for i in range(n)])
    out = bytearray((i * 37 + seed) % 256 for i in range(n // block * size))
    if block > 1:  # a small finite f16 scale at the start of each block
        for b in range(n // block):
            out[b * size:b * size + 2] = struct.pack("<e", 0.01 * (1 + b % 5))
    elif typ == "f16":
        out = bytearray(b"".join(struct.pack("<e", ((i * 13 + seed) % 41 - 20) / 64.0) for i in range(n)))
    return bytes(out)


def gguf_llama(typ="f32", tied=True, vocab="gpt2", extra_kv=None, rope_freqs=False):
    C, F, NH, NKV, V = 32, 64, 2, 1, 24
    HS = C // NH
    kv = {"general.architecture": "llama", "general.alignment": 32, "llama.context_length": 64,
          "llama.embedding_length": C, "llama.block_count": 1, "llama.feed_forward_length": F,
          "llama.attention.head_count": NH, "llama.attention.head_count_kv": NKV, "llama.rope.dimension_count": HS,
          "llama.attention.layer_norm_rms_epsilon": 1e-5, "llama.rope.freq_base": 10000.0}
    if vocab == "gpt2":
        toks = ["<|endoftext|>"] + [chr(c) for c in range(97, 97 + 20)] + ["ab", "abc", "Ġa"]
        kv.update({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "llama-bpe", "tokenizer.ggml.tokens": toks,
                   "tokenizer.ggml.token_type": [3] + [1] * (V - 1), "tokenizer.ggml.merges": ["a b", "ab c"],
                   "tokenizer.ggml.bos_token_id": 0, "tokenizer.ggml.eos_token_id": 0})
    elif vocab == "llama":
        toks = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(10)] + ["\u2581", "a", "b", "\u2581a", "ab",
                                                                                   "\u2581ab", "c", "d", "e", "f", "g"]
        kv.update({"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": toks,
                   "tokenizer.ggml.scores": [0.0] * 16 + [-1.0, -2.0, -3.0] + [0.0] * 5,
                   "tokenizer.ggml.token_type": [2, 3, 3] + [6] * 10 + [1] * 11,
                   "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
                   "tokenizer.ggml.add_bos_token": True})
    kv.update(extra_kv or {})
    lin = typ if typ in ("f32", "f16", "bf16", "q8_0", "q4_0") else "f32"
    tensors = [("token_embd.weight", [V, C], lin, 0), ("output_norm.weight", [C], "f32", 1)]
    if not tied:
        tensors.append(("output.weight", [V, C], lin, 2))
    tensors += [("blk.0.attn_norm.weight", [C], "f32", 3), ("blk.0.ffn_norm.weight", [C], "f32", 4),
                ("blk.0.attn_q.weight", [C, C], lin, 5), ("blk.0.attn_k.weight", [NKV * HS, C], lin, 6),
                ("blk.0.attn_v.weight", [NKV * HS, C], lin, 7), ("blk.0.attn_output.weight", [C, C], lin, 8),
                ("blk.0.ffn_gate.weight", [F, C], lin, 9), ("blk.0.ffn_up.weight", [F, C], lin, 10),
                ("blk.0.ffn_down.weight", [C, F], lin, 11)]
    out = [(n, s, GGUF_TYPES[t][0], gguf_tensor_data(s, t, seed)) for n, s, t, seed in tensors]
    if rope_freqs:
        out.append(("rope_freqs.weight", [HS // 2], 0, struct.pack(f"<{HS // 2}f", 1, 1, 1, 1.5, 3, 4, 4, 4)))
    return gguf_bytes(kv, out)


def gguf_seeds(out):
    for typ in GGUF_TYPES:
        put(out, f"seed_{typ}", gguf_llama(typ))
    put(out, "seed_untied_llama_vocab", gguf_llama("q8_0", tied=False, vocab="llama"))
    put(out, "seed_no_vocab_rope_freqs", gguf_llama("f32", vocab=None, rope_freqs=True))
    put(out, "seed_kv_array", gguf_llama("f16", extra_kv={"llama.attention.head_count_kv": [1],
                                                          "tokenizer.ggml.pre": "qwen2"}))
    put(out, "seed_v2", gguf_llama("f32", vocab="llama").replace(struct.pack("<II", 0x46554747, 3),
                                                                  struct.pack("<II", 0x46554747, 2), 1))
    every = {"u8": 1, "neg": -7, "f": 0.5, "b": False, "s": "x\u00e9", "arr": [[1, 2], [3]], "strs": ["a", ""],
             "floats": [1.5, -2.0], "empty": []}
    put(out, "seed_metadata_only", gguf_bytes(every, []))
    put(out, "seed_empty", gguf_bytes({}, []))


# ---- adapter_config.json ---------------------------------------------------------------------

def adapter_config_seeds(out):
    base = {"alpha_pattern": {}, "auto_mapping": None, "base_model_name_or_path": "stories260K", "bias": "none",
            "fan_in_fan_out": False, "inference_mode": True, "init_lora_weights": True, "layer_replication": None,
            "layers_pattern": None, "layers_to_transform": None, "loftq_config": {}, "lora_alpha": 16,
            "lora_dropout": 0.05, "megatron_config": None, "megatron_core": "megatron.core", "modules_to_save": None,
            "peft_type": "LORA", "r": 8, "rank_pattern": {}, "revision": None, "target_modules": ["q_proj", "v_proj"],
            "task_type": "CAUSAL_LM", "use_dora": False, "use_rslora": False}
    variants = [{}, {"target_modules": "all-linear", "bias": "all", "use_rslora": True},
                {"target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
                 "bias": "lora_only", "layers_to_transform": [0, 1], "init_lora_weights": "gaussian"},
                {"base_model_name_or_path": None, "r": 1, "lora_alpha": 0.5, "layers_to_transform": 3}]
    for i, v in enumerate(variants):
        put(out, f"seed_{i}", json.dumps({**base, **v}, indent=2, sort_keys=True))


# ---- trainer_state.json ----------------------------------------------------------------------

def trainer_state_seeds(out):
    base = {"step": 3, "epoch": 1, "position": 12, "losses": [4.5, 4.25, 4.0], "metrics_records": 5}
    variants = [{}, {"loss_scale": 65536.0, "loss_scale_clean_steps": 2, "skipped_steps": 1},
                {"step": 0, "losses": [], "metrics_records": 0}, {"metrics_records": None}]
    for i, v in enumerate(variants):
        put(out, f"seed_{i}", json.dumps({**base, **v}, indent=1))


# ---- server requests (tools/leantune/server/openai_request.cpp) -------------------------------

def openai_request_seeds(out):
    """Request bodies of both endpoints: every field the parser reads, in range and out of it."""
    bodies = [
        {"model": "m", "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0, "stop": ["."]},
        {"prompt": [1, 2, 3], "max_tokens": 0, "logprobs": 2, "seed": 18446744073709551615, "n": 2},
        {"prompt": ["a", [4, 5], "b"], "stream": True, "stream_options": {"include_usage": True}, "top_p": 0.9,
         "top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1, "no_repeat_ngram_size": 3, "ignore_eos": True,
         "stop_token_ids": [2]},
        {"prompt": "x", "use_beam_search": True, "best_of": 4, "n": 2, "length_penalty": 0.5,
         "early_stopping": "never"},
        {"prompt": "x", "num_beams": 3, "early_stopping": True, "presence_penalty": 0, "frequency_penalty": 0,
         "echo": False, "suffix": "", "logit_bias": {}, "tools": []},
        {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                      {"role": "assistant", "content": "Hello"},
                      {"role": "user", "content": [{"type": "text", "text": "parts"}]}],
         "max_completion_tokens": 16, "logprobs": True, "temperature": 0.7},
        {"messages": [{"role": "user", "content": None}], "max_tokens": -1},
        {"messages": [], "prompt": None, "top_p": 0, "n": 129, "best_of": 0},
    ]
    for i, b in enumerate(bodies):
        put(out, f"seed_{i}", json.dumps(b))
    put(out, "seed_not_object", "[1, 2]")
    put(out, "seed_bad_json", '{"prompt": "a",')


# ---- training YAML ---------------------------------------------------------------------------

def train_yaml_seeds(out):
    example = REPO / "examples/aesop_lora.yaml"
    if example.exists():
        put(out, "seed_example", example.read_bytes())
    put(out, "seed_full", """base_model: m.bin
tokenizer: tok.bin
datasets:
  - path: data.jsonl
  - path: docs/
    doc_separator: file
eval_dataset: eval.jsonl
chat_template: llama3
skip_bad_lines: true
method: full
freeze_embeddings: true
gradient_checkpointing: every:2
unfreeze_schedule: "10:1:0.5,20:0:1"
precision: fp16
initial_loss_scale: 1024
loss_scale_window: 100
seed: 7
memory_budget: 6GiB
auto_fit: true
""")
    put(out, "seed_qlora", """base_model: hf_folder
datasets: [a.txt, b.md]
method: lora
lora_r: 4
lora_alpha: 8
lora_dropout: 0.1
lora_target_modules: [q_proj, v_proj, gate_proj]
lora_bias: lora_only
lora_use_rslora: true
lora_layers_to_transform: [0, 1]
quantization: nf4
double_quant: true
quant_blocksize: 128
zero_stage: 2
offload_optimizer: disk
offload_dir: /tmp/x
zero_overlap: false
resume: auto
""")
    put(out, "seed_flow", "{base_model: m.bin, datasets: [{path: d.jsonl, min_blank_lines: 2}], max_steps: 5}\n")


# ---- JSONL data ------------------------------------------------------------------------------

def jsonl_seeds(out, shared_dir):
    recs = [{"text": "Once upon a time there was a cat."},
            {"prompt": "Q: what is 2+2?\nA:", "completion": " 4"},
            {"instruction": "Say hi.", "input": "", "output": "hi"},
            {"instruction": "Translate", "input": "chat", "output": "cat"},
            {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"},
                          {"role": "assistant", "content": "Hi!"}, {"role": "user", "content": "Bye"},
                          {"role": "assistant", "content": "Bye \u00e9 \u4e2d <|im_end|>"}]}]
    put(out, "seed_all", "\n".join(json.dumps(r, ensure_ascii=False) for r in recs) + "\n\n")
    for i, r in enumerate(recs):
        put(out, f"seed_{i}", json.dumps(r) + "\n")
    fables = shared_dir / "data/aesop_fables/aesop_fables.txt"
    if fables.exists():
        paras = [p for p in fables.read_text().split("\n\n") if p.strip()][:3]
        put(out, "seed_aesop", "".join(json.dumps({"text": p}) + "\r\n" for p in paras))


# ---- chat templates --------------------------------------------------------------------------

def chat_template_seeds(out):
    sys.path.insert(0, str(REPO / "tests" / "python"))
    from chat_template_cases import TEMPLATES
    for name, source, _, _ in TEMPLATES:
        put(out, f"seed_{name}", source)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = Path(sys.argv[1])
    shared_dir = Path(sys.argv[2]) if len(sys.argv) > 2 else REPO.parent / "shared"
    safetensors_seeds(out / "fuzz_safetensors")
    hf_config_seeds(out / "fuzz_hf_config")
    tokenizer_json_seeds(out / "fuzz_tokenizer_json")
    llama2c_model_seeds(out / "fuzz_llama2c_model", shared_dir)
    llama2c_tokenizer_seeds(out / "fuzz_llama2c_tokenizer", shared_dir)
    adapter_config_seeds(out / "fuzz_adapter_config")
    train_yaml_seeds(out / "fuzz_train_yaml")
    jsonl_seeds(out / "fuzz_jsonl_data", shared_dir)
    trainer_state_seeds(out / "fuzz_trainer_state")
    gguf_seeds(out / "fuzz_gguf")
    chat_template_seeds(out / "fuzz_chat_template")
    openai_request_seeds(out / "fuzz_openai_request")
    for name, sources in DICT_SOURCES.items():
        kind = ("yaml" if name == "fuzz_train_yaml" else "gguf" if name == "fuzz_gguf" else
                "jinja" if name == "fuzz_chat_template" else "json" if sources else None)
        if kind:
            dictionary(out / f"{name}.dict", sources, EXTRA_DICT[kind])
    total = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"fuzz_corpus: {sum(1 for _ in out.rglob('seed_*'))} seeds, {total} bytes in {out}")


if __name__ == "__main__":
    main()

# Parity of leantune's forward pass with Hugging Face transformers (the oracle): random-weight
# models built by transformers for a Llama config with llama3 rope scaling, a Qwen2 config (q/k/v
# biases), a tied-embedding SmolLM2-like config and a Mistral config; next-token logits over a
# 64-token prompt and 16 decode steps through the KV cache must agree within 1e-4 (fp32). build()
# also makes the Qwen3 models of test_qwen3_parity.py; check_greedy() compares greedy generation.
import json
import os
import subprocess

import numpy as np
import pytest
import torch
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

PROMPT_LEN, DECODE_STEPS = 64, 16


def randomize(model, seed):
    # Larger-than-default weights so that logits carry signal; norms away from 1.
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.08 * torch.randn(p.shape, generator=g))
    return model


def build(kind, seed=0):
    torch.manual_seed(seed)
    if kind == "llama3":
        c = LlamaConfig(hidden_size=96, intermediate_size=200, num_hidden_layers=3, num_attention_heads=6,
                        num_key_value_heads=2, vocab_size=300, max_position_embeddings=512, rms_norm_eps=1e-5,
                        rope_theta=500000.0,
                        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 64})
        m = LlamaForCausalLM(c)
    elif kind == "qwen2":
        c = Qwen2Config(hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, vocab_size=320, max_position_embeddings=512, rms_norm_eps=1e-6,
                        rope_theta=1000000.0, tie_word_embeddings=False)
        m = Qwen2ForCausalLM(c)
    elif kind == "smollm2":
        c = LlamaConfig(hidden_size=96, intermediate_size=256, num_hidden_layers=3, num_attention_heads=3,
                        num_key_value_heads=1, vocab_size=350, max_position_embeddings=512, rms_norm_eps=1e-5,
                        rope_theta=100000.0, tie_word_embeddings=True)
        m = LlamaForCausalLM(c)
    elif kind == "mistral":
        c = MistralConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=8,
                          num_key_value_heads=2, head_dim=16, vocab_size=300, max_position_embeddings=512,
                          sliding_window=4096)
        m = MistralForCausalLM(c)
    elif kind in ("qwen3", "qwen3_bias"):
        # head_dim 24 != hidden / heads = 16; qwen3: tied embeddings, qwen3_bias: q/k/v/o biases
        c = Qwen3Config(hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, head_dim=24, vocab_size=320, max_position_embeddings=512,
                        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=kind == "qwen3",
                        attention_bias=kind == "qwen3_bias")
        m = Qwen3ForCausalLM(c)
    else:
        raise ValueError(kind)
    return randomize(m.eval(), seed + 1)


def hf_logits(model, ids):
    with torch.no_grad():
        out = model(torch.tensor([ids]), use_cache=False).logits[0]
    return out[PROMPT_LEN - 1:].float().numpy()  # prefill's last token, then each decode step


def our_logits(leantune_bin, path, ids, tmp_path, extra=()):
    out = tmp_path / "logits.f32"
    cmd = [leantune_bin, "logits", "--model", str(path), "--ids", ",".join(map(str, ids[:PROMPT_LEN])),
           "--decode", ",".join(map(str, ids[PROMPT_LEN:PROMPT_LEN + DECODE_STEPS - 1])), "--out", str(out), *extra]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return np.fromfile(out, dtype=np.float32)


def check(leantune_bin, model, folder, tmp_path, seed, extra=(), tol=1e-4):
    rng = np.random.default_rng(seed)
    V = model.config.vocab_size
    ids = rng.integers(0, V, size=PROMPT_LEN + DECODE_STEPS).tolist()
    ref = hf_logits(model, ids)[:DECODE_STEPS]
    ours = our_logits(leantune_bin, folder, ids, tmp_path, extra).reshape(-1, V)
    assert ours.shape == ref.shape
    diff = np.abs(ours - ref).max()
    assert np.abs(ref).max() > 0.5, "logits too small to be a meaningful test"
    assert diff <= tol, f"max abs diff {diff:.3g} > {tol}"
    return diff


@pytest.mark.parametrize("kind", ["llama3", "qwen2", "smollm2", "mistral"])
def test_logits_match_transformers(leantune_bin, tmp_path, kind):
    model = build(kind)
    folder = tmp_path / kind
    model.save_pretrained(folder, safe_serialization=True)
    check(leantune_bin, model, folder, tmp_path, seed=7)
    # small prefill blocks: the cache is filled across several blocks
    check(leantune_bin, model, folder, tmp_path, seed=8, extra=("--prefill-block", "7"))
    # the scalar reference kernels agree too
    check(leantune_bin, model, folder, tmp_path, seed=9, extra=("--reference",))


def test_sharded_bf16_and_legacy_rope_config(leantune_bin, tmp_path):
    # bf16 weights in a sharded folder, config written in the pre-v5 style (rope_theta + rope_scaling)
    build("llama3", seed=3).to(torch.bfloat16).save_pretrained(folder := tmp_path / "sharded",
                                                                 safe_serialization=True, max_shard_size="100KB")
    # the oracle: the same weights rounded to bf16, computed in f32 (casting the HF module itself to
    # bf16 would also round its rotary inv_freq buffer, which the file does not carry)
    model = build("llama3", seed=3)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    assert (folder / "model.safetensors.index.json").exists()
    cfg = json.loads((folder / "config.json").read_text())
    rp = cfg.pop("rope_parameters", None)
    if rp is not None:
        cfg["rope_theta"] = rp.pop("rope_theta")
        rp["type"] = rp.pop("rope_type")
        cfg["rope_scaling"] = rp
    (folder / "config.json").write_text(json.dumps(cfg))
    check(leantune_bin, model, folder, tmp_path, seed=11)


def write_byte_tokenizer(folder):
    """A byte-level BPE tokenizer.json with the 256 byte tokens and no merges (ids 0..255), so that
    `leantune generate` can run a random-weight model whose vocabulary holds at least 256 ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tok = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(sorted(alphabet))}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.save(str(folder / "tokenizer.json"))


def check_greedy(leantune_bin, model, folder, tmp_path, prompt, n=64, context=None, extra=()):
    """n greedy tokens from `prompt` through `leantune generate` equal transformers' generate()."""
    from transformers import GenerationConfig
    write_byte_tokenizer(folder)
    gc = GenerationConfig(max_new_tokens=n, min_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0)
    with torch.no_grad():
        ref = model.generate(torch.tensor([prompt]), generation_config=gc)[0, len(prompt):].tolist()
    ids_out = tmp_path / "greedy_ids.txt"
    cmd = [leantune_bin, "generate", "--model", str(folder), "--prompt-ids", ",".join(map(str, prompt)),
           "--ids-out", str(ids_out), "--temperature", "0", "--ignore-eos", "-n", str(n), "-q", *extra]
    if context:
        cmd += ["--context", str(context)]
    r = subprocess.run(cmd, capture_output=True)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    ours = [int(x) for x in ids_out.read_text().strip().split(",")]
    assert len(ref) == n
    assert ours == ref, f"greedy tokens differ from position {next(i for i, (a, b) in enumerate(zip(ours, ref)) if a != b)}"

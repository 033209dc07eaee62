"""Logits parity with transformers for every rope_scaling type, on prompts longer than the
original context.

Random-weight Llama models built with transformers' own classes (fp32), one per type: linear,
dynamic (NTK), yarn (with and without mscale / mscale_all_dim), longrope (short and long factor
lists) and llama3. The reference is transformers run as `leantune logits` runs: the prompt in one
forward pass, then one token at a time through the KV cache, so that the types whose frequencies
depend on the length of each call (dynamic, longrope) are compared call for call. Every prompt is
longer than the context the scaling extends (original_max_position_embeddings; for dynamic,
max_position_embeddings).
"""
import subprocess

import numpy as np
import pytest
import torch
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

DECODE_STEPS = 12
TOL = 1e-4

# name: (rope_scaling, max_position_embeddings, prompt length)
CASES = {
    "linear": ({"rope_type": "linear", "factor": 4.0}, 256, 80),
    "dynamic": ({"rope_type": "dynamic", "factor": 2.0}, 32, 48),
    "yarn": ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}, 128, 64),
    "yarn_mscale": ({"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 16, "mscale": 0.707,
                     "mscale_all_dim": 1.0, "beta_fast": 16.0, "beta_slow": 2.0}, 128, 56),
    "yarn_attention_factor": ({"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 32,
                               "attention_factor": 1.25, "truncate": False}, 64, 48),
    "longrope": ("longrope", 128, 64),
    "longrope_crossing": ("longrope", 128, 28),  # the decode steps cross the original context (32)
    "llama3": ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 32}, 256, 64),
}
HEAD_DIM = 16


def longrope_scaling(seed, original=32):
    g = np.random.default_rng(seed)
    half = HEAD_DIM // 2
    return {"rope_type": "longrope", "original_max_position_embeddings": original,
            "short_factor": (1.0 + 0.5 * g.random(half)).round(4).tolist(),
            "long_factor": (1.0 + 6.0 * np.sort(g.random(half))).round(4).tolist()}


def build(name, seed=0):
    scaling, max_pos, _ = CASES[name]
    if scaling == "longrope":
        scaling = longrope_scaling(seed)
    return build_model(scaling, max_pos, seed)


def build_model(scaling, max_pos, seed):
    torch.manual_seed(seed)
    c = LlamaConfig(hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=HEAD_DIM, vocab_size=256, max_position_embeddings=max_pos,
                    rms_norm_eps=1e-5, rope_theta=10000.0, rope_scaling=scaling)
    m = LlamaForCausalLM(c).eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for pname, p in m.named_parameters():
            p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g) if "norm" in pname else
                    0.08 * torch.randn(p.shape, generator=g))
    return m


def hf_incremental_logits(model, prompt, decode):
    """The prompt in one call, then each decode token through the cache, as `leantune logits`."""
    rows = []
    with torch.no_grad():
        cache = DynamicCache(config=model.config)
        out = model(torch.tensor([prompt]), cache=cache, use_cache=True)
        rows.append(out.logits[0, -1])
        for i, t in enumerate(decode):
            pos = torch.tensor([[len(prompt) + i]])
            out = model(torch.tensor([[t]]), cache=cache, use_cache=True, position_ids=pos)
            rows.append(out.logits[0, -1])
    return torch.stack(rows).float().numpy()


def leantune_logits(leantune_bin, folder, prompt, decode, tmp_path, context):
    out = tmp_path / "logits.f32"
    cmd = [leantune_bin, "logits", "--model", str(folder), "--ids", ",".join(map(str, prompt)),
           "--decode", ",".join(map(str, decode)), "--out", str(out), "--context", str(context),
           "--prefill-block", str(len(prompt))]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return np.fromfile(out, dtype=np.float32)


@pytest.mark.parametrize("name", list(CASES))
def test_rope_scaling_logits_match_transformers(leantune_bin, tmp_path, name):
    model = build(name)
    scaling, max_pos, prompt_len = CASES[name]
    original = max_pos if name == "dynamic" else model.config.rope_parameters.get("original_max_position_embeddings")
    if original is not None and name != "longrope_crossing":
        assert prompt_len > original, "the prompt must be longer than the context the scaling extends"
    folder = tmp_path / name
    model.save_pretrained(folder, safe_serialization=True)
    ids = np.random.default_rng(5).integers(0, model.config.vocab_size, size=prompt_len + DECODE_STEPS).tolist()
    prompt, decode = ids[:prompt_len], ids[prompt_len:prompt_len + DECODE_STEPS - 1]
    ref = hf_incremental_logits(model, prompt, decode)
    ours = leantune_logits(leantune_bin, folder, prompt, decode, tmp_path, context=prompt_len + DECODE_STEPS)
    ours = ours.reshape(ref.shape)
    assert np.abs(ref).max() > 0.5, "logits too small to be a meaningful test"
    diff = np.abs(ours - ref).max()
    assert diff <= TOL, f"{name}: max abs diff {diff:.3g} > {TOL}"


def test_attention_factor_matters():
    """The yarn case is not passing by accident: without its attention factor the logits move."""
    model = build("yarn")
    rope = model.model.rotary_emb
    assert abs(rope.attention_scaling - 1.0) > 0.1
    _, _, prompt_len = CASES["yarn"]
    ids = np.random.default_rng(5).integers(0, model.config.vocab_size, size=prompt_len + 2).tolist()
    with_factor = hf_incremental_logits(model, ids[:prompt_len], ids[prompt_len:prompt_len + 1])
    rope.attention_scaling = 1.0
    without = hf_incremental_logits(model, ids[:prompt_len], ids[prompt_len:prompt_len + 1])
    assert np.abs(with_factor - without).max() > 100 * TOL


# Training: one forward + backward of B x T = 2 x 24 tokens (test_train_parity's harness), with
# original contexts of 16 so that the batch runs past them.
TRAIN_CASES = {
    "linear": {"rope_type": "linear", "factor": 4.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
    "longrope": "longrope",
}


@pytest.mark.parametrize("method", ["full", "lora"])
@pytest.mark.parametrize("name", list(TRAIN_CASES))
def test_rope_scaling_gradients_match_pytorch(leantune_bin, tmp_path, name, method):
    from test_train_parity import MODULES, B, T, hf_loss, rel_err, run_grad
    scaling = longrope_scaling(3, original=16) if TRAIN_CASES[name] == "longrope" else TRAIN_CASES[name]
    model = build_model(scaling, 64, seed=2)
    assert T > 16
    folder = tmp_path / "base"
    model.save_pretrained(folder, safe_serialization=True)
    tokens = np.random.default_rng(4).integers(0, model.config.vocab_size, size=B * T)
    extra = ["--method", "full"]
    if method == "lora":
        from peft import LoraConfig, get_peft_model
        torch.manual_seed(5)
        model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=MODULES,
                                                 init_lora_weights=False, task_type="CAUSAL_LM"))
        model.save_pretrained(tmp_path / "adapter")
        extra = ["--adapter", str(tmp_path / "adapter"), "--lora-r", "8", "--lora-alpha", "16"]
    loss = hf_loss(model, tokens)
    loss.backward()
    ours_loss, grads = run_grad(leantune_bin, folder, tokens, tmp_path, extra)
    assert abs(ours_loss - loss.item()) <= 1e-4 * abs(loss.item())
    n = 0
    for pname, p in model.named_parameters():
        if not p.requires_grad:
            continue
        key = pname.replace(".default", "")
        err = rel_err(grads[key], p.grad.numpy())
        assert err <= 1e-4, f"{key}: relative error {err:.3g}"
        n += 1
    assert n == len(grads)


@pytest.mark.parametrize("name", ["dynamic", "yarn", "longrope_crossing"])
def test_rope_scaling_greedy_generate_matches_transformers(leantune_bin, tmp_path, name):
    """64 greedy tokens through `leantune generate` equal transformers' generate(): the per-call
    frequencies (dynamic grows them at every decode step past max_position_embeddings, longrope
    switches to long_factor when the sequence crosses the original context) with the KV cache."""
    from test_model_parity import check_greedy
    model = build(name)
    _, max_pos, prompt_len = CASES[name]
    folder = tmp_path / name
    model.save_pretrained(folder, safe_serialization=True)
    prompt = np.random.default_rng(6).integers(0, model.config.vocab_size, size=prompt_len).tolist()
    context = prompt_len + 64
    if name == "dynamic":
        assert context > max_pos  # generate runs past max_position_embeddings
    check_greedy(leantune_bin, model, folder, tmp_path, prompt, n=64, context=context)

"""Sliding-window attention against transformers (eager attention, random weights, fp32).

A Mistral config with sliding_window 16 over 100-token sequences: the logits of a prompt and
decode steps through the KV cache (whose sliding layers are a rolling cache of window + prefill
block - 1 rows: prefill blocks of 7 wrap around it), 64 greedy tokens, and the loss and gradients
of training (full and LoRA) over B x 100 tokens. A Qwen2 config with use_sliding_window and
max_window_layers 1 (layer 0 full, layer 1 sliding) checks the per-layer choice. Each case also
checks that the window changes the result, so that a model ignoring it would fail.
"""
import subprocess

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file
from transformers import MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM

from test_model_parity import check_greedy, randomize

WINDOW, SEQ = 16, 100
PROMPT, DECODE = 84, 16  # prompt + decode = SEQ
TOL = 1e-4


def build(kind, window=WINDOW, seed=0):
    torch.manual_seed(seed)
    if kind == "mistral":
        c = MistralConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=8,
                          num_key_value_heads=2, head_dim=16, vocab_size=300, max_position_embeddings=512,
                          sliding_window=window)
        m = MistralForCausalLM(c)
    else:
        c = Qwen2Config(hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, vocab_size=320, max_position_embeddings=512, rms_norm_eps=1e-6,
                        use_sliding_window=window is not None, sliding_window=window, max_window_layers=1)
        m = Qwen2ForCausalLM(c)
    m.config._attn_implementation = "eager"
    return randomize(m.eval(), seed + 1)


def hf_logits(model, ids):
    with torch.no_grad():
        # the prompt's last token, then each decode step
        return model(torch.tensor([ids]), use_cache=False).logits[0, PROMPT - 1:SEQ - 1].float().numpy()


def our_logits(leantune_bin, folder, ids, tmp_path, *extra):
    out = tmp_path / "logits.f32"
    r = subprocess.run([leantune_bin, "logits", "--model", str(folder), "--ids", ",".join(map(str, ids[:PROMPT])),
                        "--decode", ",".join(map(str, ids[PROMPT:SEQ - 1])), "--out", str(out), *extra],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return np.fromfile(out, dtype=np.float32)


@pytest.mark.parametrize("kind", ["mistral", "qwen2"])
def test_logits_match_transformers(leantune_bin, tmp_path, kind):
    model = build(kind)
    folder = tmp_path / kind
    model.save_pretrained(folder, safe_serialization=True)
    ids = np.random.default_rng(7).integers(0, model.config.vocab_size, size=SEQ).tolist()
    ref = hf_logits(model, ids)
    assert np.abs(ref - hf_logits(build(kind, window=None), ids)).max() > 1e-2, "the window changes nothing"
    # one prefill block; blocks of 7 (the rolling cache of 22 rows wraps inside the prompt); the
    # reference kernels; a cache of exactly the sequence
    for extra in [(), ("--prefill-block", "7"), ("--reference", "--prefill-block", "5"), ("--context", str(SEQ))]:
        ours = our_logits(leantune_bin, folder, ids, tmp_path, *extra).reshape(ref.shape)
        diff = np.abs(ours - ref).max()
        assert diff <= TOL, f"{kind} {extra}: max abs diff {diff:.3g}"


def test_greedy_generation_matches_transformers(leantune_bin, tmp_path):
    model = build("mistral")
    folder = tmp_path / "mistral"
    model.save_pretrained(folder, safe_serialization=True)
    prompt = np.random.default_rng(8).integers(0, 256, size=40).tolist()
    check_greedy(leantune_bin, model, folder, tmp_path, prompt, n=64)


def test_kv_cache_of_sliding_layers_is_a_rolling_window(leantune_bin, tmp_path):
    """`leantune plan --generate`: a sliding layer's KV cache holds window + block - 1 rows, not the context."""
    import json

    def kv_bytes(window):
        folder = tmp_path / f"w{window}"
        build("mistral", window=window).config.save_pretrained(folder)
        r = subprocess.run([leantune_bin, "plan", "--generate", "--model", str(folder), "--context", "512",
                            "--prefill-block", "8", "--json"], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)["categories"]["kv_cache"]

    kvd = 2 * 16  # key/value heads x head_dim
    assert kv_bytes(WINDOW) == 2 * 2 * (WINDOW + 8 - 1) * kvd * 4  # layers x (k, v) x rows x KVD floats
    assert kv_bytes(None) == 2 * 2 * 512 * kvd * 4


B = 2


def hf_loss(model, tokens):
    ids = torch.tensor(np.asarray(tokens).reshape(B, SEQ))
    return model(input_ids=ids, labels=ids).loss


def run_grad(leantune_bin, folder, tokens, out, extra):
    tok_file = out / "tokens.i32"
    np.asarray(tokens, dtype=np.int32).tofile(tok_file)
    r = subprocess.run([leantune_bin, "grad", "--model", str(folder), "--tokens", str(tok_file), "--batch", str(B),
                        "--seq", str(SEQ), "--out", str(out), *extra], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return float((out / "loss.txt").read_text()), load_file(str(out / "grads.safetensors"))


def rel_err(a, b):
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


@pytest.mark.parametrize("kind,method,ckpt", [("mistral", "full", "none"), ("mistral", "lora", "every"),
                                              ("qwen2", "full", "attention"), ("qwen2", "lora", "none")])
def test_gradients_match_pytorch(leantune_bin, tmp_path, kind, method, ckpt):
    model = build(kind)
    folder = tmp_path / "base"
    model.save_pretrained(folder, safe_serialization=True)
    tokens = np.random.default_rng(4).integers(0, model.config.vocab_size, size=B * SEQ)
    extra = ["--method", "full", "--checkpointing", ckpt]
    if method == "lora":
        from peft import LoraConfig, get_peft_model
        torch.manual_seed(5)
        model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, init_lora_weights=False,
                                                 target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                                 "up_proj", "down_proj"], task_type="CAUSAL_LM"))
        model.save_pretrained(tmp_path / "adapter")
        extra = ["--adapter", str(tmp_path / "adapter"), "--lora-r", "8", "--lora-alpha", "16", "--checkpointing",
                 ckpt]
    loss = hf_loss(model, tokens)
    loss.backward()
    with torch.no_grad():
        assert abs(hf_loss(build(kind, window=None), tokens).item() - loss.item()) > 1e-3, "the window changes nothing"
    ours_loss, grads = run_grad(leantune_bin, folder, tokens, tmp_path, extra)
    assert abs(ours_loss - loss.item()) <= 1e-4 * abs(loss.item())
    n = 0
    for name, p in model.named_parameters():
        if p.requires_grad:
            key = name.replace(".default", "")
            err = rel_err(grads[key], p.grad.numpy())
            assert err <= 1e-4, f"{key}: relative error {err:.3g}"
            n += 1
    assert n == len(grads)

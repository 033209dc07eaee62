"""Qwen3 (dense) against transformers' Qwen3ForCausalLM and PEFT, random weights, fp32.

Qwen3 differs from Qwen2 by an RMSNorm per head on q and k (self_attn.q_norm / k_norm, over
head_dim, before RoPE), no q/k/v biases unless attention_bias (then q, k, v and o have one) and a
head_dim of its own (here 24, where hidden / heads = 16). Two configs: `qwen3` (tied embeddings,
no biases) and `qwen3_bias` (untied, attention_bias). Checked: logits over a prompt and decode
steps (1e-4), 64 greedy tokens, loss and LoRA gradients against PEFT, full fine-tuning gradients
(the q_norm / k_norm weights included), a PEFT-saved adapter loaded by us, and an adapter and a
full model trained by `leantune train` loaded by PEFT / transformers.
"""
import subprocess

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file, save_file

from family_parity import check_full_fine_tune_loads, check_mode_starts_where_fp32_does, check_peft_loads_our_adapter
from test_model_parity import build, check, check_greedy, hf_logits, our_logits, PROMPT_LEN, DECODE_STEPS
from test_train_parity import MODULES, B, T, hf_loss, rel_err, run_grad

KINDS = ["qwen3", "qwen3_bias"]


@pytest.fixture
def saved(tmp_path, request):
    model = build(request.param)
    folder = tmp_path / request.param
    model.save_pretrained(folder, safe_serialization=True)
    return model, folder


@pytest.mark.parametrize("saved", KINDS, indirect=True)
def test_logits_match_transformers(leantune_bin, tmp_path, saved):
    model, folder = saved
    assert model.config.head_dim * model.config.num_attention_heads != model.config.hidden_size
    check(leantune_bin, model, folder, tmp_path, seed=7)
    check(leantune_bin, model, folder, tmp_path, seed=8, extra=("--prefill-block", "7"))
    check(leantune_bin, model, folder, tmp_path, seed=9, extra=("--reference",))


@pytest.mark.parametrize("saved", KINDS, indirect=True)
def test_greedy_generation_matches_transformers(leantune_bin, tmp_path, saved):
    model, folder = saved
    prompt = np.random.default_rng(10).integers(0, 256, size=12).tolist()
    check_greedy(leantune_bin, model, folder, tmp_path, prompt, n=64)


def test_qk_norm_matters(leantune_bin, tmp_path):
    """The per-head norms are applied: with q_norm scaled the logits move (not a vacuous pass)."""
    model = build("qwen3")
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_norm.weight.mul_(1.5)
    ids = np.random.default_rng(7).integers(0, 320, size=PROMPT_LEN + DECODE_STEPS).tolist()
    assert np.abs(hf_logits(model, ids) - hf_logits(build("qwen3"), ids)).max() > 1e-2


@pytest.mark.parametrize("kind,ckpt", [("qwen3", "none"), ("qwen3_bias", "attention"), ("qwen3", "every")])
def test_lora_gradients_match_peft(leantune_bin, tmp_path, kind, ckpt):
    from peft import LoraConfig, get_peft_model
    model = build(kind)
    folder = tmp_path / "base"
    model.save_pretrained(folder, safe_serialization=True)
    torch.manual_seed(5)
    pm = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=MODULES,
                                          init_lora_weights=False, task_type="CAUSAL_LM"))
    pm.save_pretrained(tmp_path / "adapter")
    tokens = np.random.default_rng(3).integers(0, model.config.vocab_size, size=B * T)
    loss = hf_loss(pm, tokens)
    loss.backward()
    ours_loss, grads = run_grad(leantune_bin, folder, tokens, tmp_path,
                                ["--adapter", str(tmp_path / "adapter"), "--lora-r", "8", "--lora-alpha", "16",
                                 "--checkpointing", ckpt])
    assert abs(ours_loss - loss.item()) <= 1e-4 * abs(loss.item())
    n = 0
    for name, p in pm.named_parameters():
        if p.requires_grad:
            key = name.replace(".default", "")
            err = rel_err(grads[key], p.grad.numpy())
            assert err <= 1e-4, f"{key}: relative error {err:.3g}"
            n += 1
    assert n == len(grads) == 2 * 7 * model.config.num_hidden_layers


@pytest.mark.parametrize("kind,ckpt", [("qwen3", "none"), ("qwen3_bias", "none"), ("qwen3", "attention")])
def test_full_gradients_match_pytorch(leantune_bin, tmp_path, kind, ckpt):
    model = build(kind)
    folder = tmp_path / "base"
    model.save_pretrained(folder, safe_serialization=True)
    tokens = np.random.default_rng(4).integers(0, model.config.vocab_size, size=B * T)
    loss = hf_loss(model, tokens)
    loss.backward()
    ours_loss, grads = run_grad(leantune_bin, folder, tokens, tmp_path, ["--method", "full", "--checkpointing", ckpt])
    assert abs(ours_loss - loss.item()) <= 1e-4 * abs(loss.item())
    names = {n for n, _ in model.named_parameters()}
    assert set(grads) == names and "model.layers.1.self_attn.k_norm.weight" in names
    for name, p in model.named_parameters():
        err = rel_err(grads[name], p.grad.numpy())
        assert err <= 1e-4, f"{name}: relative error {err:.3g}"


@pytest.mark.parametrize("saved", ["qwen3_bias"], indirect=True)
def test_we_load_a_peft_adapter(leantune_bin, tmp_path, saved):
    from peft import LoraConfig, get_peft_model
    model, folder = saved
    torch.manual_seed(2)
    pm = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, init_lora_weights=False, task_type="CAUSAL_LM",
                                          target_modules=["q_proj", "k_proj", "v_proj", "down_proj"]))
    pm.save_pretrained(tmp_path / "peft")
    ids = np.random.default_rng(3).integers(0, 320, size=PROMPT_LEN + DECODE_STEPS).tolist()
    ref = hf_logits(pm.eval(), ids)[:DECODE_STEPS]
    assert np.abs(ref - hf_logits(build("qwen3_bias"), ids)[:DECODE_STEPS]).max() > 1e-2
    ours = our_logits(leantune_bin, folder, ids, tmp_path, ("--adapter", str(tmp_path / "peft")))
    assert np.abs(ours.reshape(DECODE_STEPS, -1) - ref).max() <= 1e-4


WORDS = ["qwen", "norm", "head", "rope"]


@pytest.mark.parametrize("saved", ["qwen3"], indirect=True)
def test_peft_loads_our_adapter(leantune_bin, tmp_path, saved):
    _, folder = saved
    check_peft_loads_our_adapter(leantune_bin, tmp_path, folder, lambda: build("qwen3"), WORDS)


@pytest.mark.parametrize("saved", ["qwen3_bias"], indirect=True)
def test_full_fine_tune_folder_loads_in_transformers(leantune_bin, tmp_path, saved):
    from transformers import Qwen3ForCausalLM
    _, folder = saved
    check_full_fine_tune_loads(leantune_bin, tmp_path, folder, Qwen3ForCausalLM, WORDS,
                               "model.layers.0.self_attn.q_norm.weight")


@pytest.mark.parametrize("saved", ["qwen3"], indirect=True)
def test_missing_k_norm_is_an_error_naming_it(leantune_bin, tmp_path, saved):
    _, folder = saved
    tensors = load_file(str(folder / "model.safetensors"))
    del tensors["model.layers.1.self_attn.k_norm.weight"]
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    r = subprocess.run([leantune_bin, "logits", "--model", str(folder), "--ids", "1,2,3", "--out",
                        str(tmp_path / "l.f32")], capture_output=True, text=True)
    assert r.returncode != 0
    assert "model.layers.1.self_attn.k_norm.weight" in r.stderr and "qwen3" in r.stderr, r.stderr


@pytest.mark.parametrize("saved", ["qwen3"], indirect=True)
def test_gguf_export_refuses_qwen3_by_name(leantune_bin, tmp_path, saved):
    from test_model_parity import write_byte_tokenizer
    _, folder = saved
    write_byte_tokenizer(folder)
    r = subprocess.run([leantune_bin, "export", "--model", str(folder), "--gguf", str(tmp_path / "m.gguf")],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "qwen3" in r.stderr and "q_norm" in r.stderr, r.stderr
    assert not (tmp_path / "m.gguf").exists()


@pytest.mark.parametrize("mode", [("--quantization", "nf4", "--double-quant", "true"), ("--precision", "bf16"),
                                  ("--method", "full", "--precision", "bf16", "--gradient-checkpointing", "mlp")],
                         ids=["qlora_nf4", "lora_bf16", "full_bf16_mlp_ckpt"])
def test_training_modes_run_and_start_where_fp32_does(leantune_bin, tmp_path, mode):
    """QLoRA, 16-bit and checkpointed runs on Qwen3 (the per-head norms in every mode)."""
    folder = tmp_path / "base"
    build("qwen3").save_pretrained(folder, safe_serialization=True)
    check_mode_starts_where_fp32_does(leantune_bin, tmp_path, folder, WORDS, mode)

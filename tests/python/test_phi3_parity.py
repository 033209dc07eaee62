"""Phi-3 against transformers' Phi3ForCausalLM and PEFT, random weights, fp32 (eager attention).

Phi-3 stores q, k, v as one self_attn.qkv_proj (rows q, then k, then v) and gate, up as one
mlp.gate_up_proj (rows gate, then up); PEFT adapts those fused modules (one lora_A, one lora_B of
q+k+v rows). leantune splits them on load and fuses them on save (src/io/fused_proj.h); a LoRA on a
fused module is one A shared by the split projections and B's row blocks. Three configs: `phi3`
(GQA, untied), `phi3_longrope` (a longrope scaling given as the legacy type "su", running past its
original context of 32) and `phi3_window` (sliding_window 16 over the 80-token sequences). Checked:
logits over a prompt and decode steps (1e-4, the LlamaModel path), 64 greedy tokens, the serve
batch engine's greedy tokens with a PEFT adapter served unmerged, loss and LoRA gradients against
PEFT on the fused modules, full fine-tuning gradients, a PEFT-saved adapter loaded by us, an
adapter and a full model trained by `leantune train` loaded by PEFT / transformers, and the
refusals (partial rotary, q_proj targets on Phi-3).
"""
import json
import subprocess

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from family_parity import check_full_fine_tune_loads, check_mode_starts_where_fp32_does, check_peft_loads_our_adapter
from test_model_parity import PROMPT_LEN, DECODE_STEPS, check, check_greedy, hf_logits, our_logits, randomize
from test_train_parity import B, T, hf_loss, rel_err, run_grad

PHI3_MODULES = ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]
KINDS = ["phi3", "phi3_longrope", "phi3_window"]
HS = 16  # head size of every config here (hidden 64 / 4 heads)


def build_phi3(kind="phi3", seed=0):
    from transformers import Phi3Config, Phi3ForCausalLM
    torch.manual_seed(seed)
    extra = {}
    if kind == "phi3_longrope":
        rng = np.random.default_rng(1)
        extra = dict(original_max_position_embeddings=32,
                     rope_scaling={"type": "longrope", "short_factor": (1 + rng.random(HS // 2)).tolist(),
                                   "long_factor": (1 + 4 * rng.random(HS // 2)).tolist()})
    if kind == "phi3_window":
        extra = dict(sliding_window=16)
    c = Phi3Config(hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, vocab_size=320, max_position_embeddings=512, rms_norm_eps=1e-5,
                   rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                   attn_implementation="eager", **extra)
    if kind != "phi3_window":
        c.sliding_window = None
    return randomize(Phi3ForCausalLM(c).eval(), seed + 1)


def save(model, folder, kind):
    model.save_pretrained(folder, safe_serialization=True)
    if kind == "phi3_longrope":  # the legacy name Phi-3-mini-128k's config.json uses
        cfg = json.loads((folder / "config.json").read_text())
        rp = cfg.pop("rope_parameters", None) or cfg.pop("rope_scaling")
        rp.pop("rope_type", None)
        rp["type"] = "su"
        cfg["rope_theta"] = rp.pop("rope_theta", cfg.get("rope_theta", 10000.0))
        rp.pop("partial_rotary_factor", None)
        cfg["rope_scaling"] = rp
        (folder / "config.json").write_text(json.dumps(cfg))
    return folder


@pytest.fixture
def saved(tmp_path, request):
    model = build_phi3(request.param)
    return model, save(model, tmp_path / request.param, request.param)


def test_checkpoint_is_fused(tmp_path):
    folder = save(build_phi3(), tmp_path / "m", "phi3")
    names = set(load_file(str(folder / "model.safetensors")))
    assert "model.layers.0.self_attn.qkv_proj.weight" in names and "model.layers.0.mlp.gate_up_proj.weight" in names
    assert not any("q_proj" in n or "gate_proj" in n for n in names)


@pytest.mark.parametrize("saved", KINDS, indirect=True)
def test_logits_match_transformers(leantune_bin, tmp_path, saved):
    model, folder = saved
    check(leantune_bin, model, folder, tmp_path, seed=7)
    check(leantune_bin, model, folder, tmp_path, seed=8, extra=("--prefill-block", "7"))
    check(leantune_bin, model, folder, tmp_path, seed=9, extra=("--reference",))


def test_longrope_and_window_matter():
    """Each variant changes the logits (the configs are not vacuous)."""
    ids = np.random.default_rng(7).integers(0, 320, size=PROMPT_LEN + DECODE_STEPS).tolist()
    plain = hf_logits(build_phi3("phi3"), ids)
    for kind in ("phi3_longrope", "phi3_window"):
        assert np.abs(hf_logits(build_phi3(kind), ids) - plain).max() > 1e-2, kind


@pytest.mark.parametrize("saved", ["phi3", "phi3_window"], indirect=True)
def test_greedy_generation_matches_transformers(leantune_bin, tmp_path, saved):
    model, folder = saved
    prompt = np.random.default_rng(10).integers(0, 256, size=12).tolist()
    check_greedy(leantune_bin, model, folder, tmp_path, prompt, n=64)


def peft_model(model, seed, modules=PHI3_MODULES, r=8, alpha=16):
    from peft import LoraConfig, get_peft_model
    torch.manual_seed(seed)
    return get_peft_model(model, LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.0, target_modules=modules,
                                            init_lora_weights=False, task_type="CAUSAL_LM"))


@pytest.mark.parametrize("kind,ckpt,modules", [("phi3", "none", "all-linear"),
                                               ("phi3_longrope", "attention", ["qkv_proj", "down_proj"]),
                                               ("phi3", "every", ["gate_up_proj", "o_proj"])])


def test_lora_gradients_match_peft(leantune_bin, tmp_path, kind, ckpt, modules):
    model = build_phi3(kind)
    folder = save(model, tmp_path / "base", kind)
    pm = peft_model(model, 5, modules)
    pm.save_pretrained(tmp_path / "adapter")
    saved_keys = set(load_file(str(tmp_path / "adapter" / "adapter_model.safetensors")))
    assert any("qkv_proj" in k or "gate_up_proj" in k for k in saved_keys)
    tokens = np.random.default_rng(3).integers(0, model.config.vocab_size, size=B * T)
    loss = hf_loss(pm, tokens)
    loss.backward()
    targets = ["all-linear"] if modules == "all-linear" else modules
    ours_loss, grads = run_grad(leantune_bin, folder, tokens, tmp_path,
                                ["--adapter", str(tmp_path / "adapter"), "--lora-r", "8", "--lora-alpha", "16",
                                 "--checkpointing", ckpt, "--lora-target-modules", *targets])
    assert abs(ours_loss - loss.item()) <= 1e-4 * abs(loss.item())
    n = 0
    for name, p in pm.named_parameters():
        if p.requires_grad:
            key = name.replace(".default", "")
            assert grads[key].shape == tuple(p.shape), key
            err = rel_err(grads[key], p.grad.numpy())
            assert err <= 1e-4, f"{key}: relative error {err:.3g}"
            n += 1
    assert n == len(grads) > 0


@pytest.mark.parametrize("kind,ckpt", [("phi3", "none"), ("phi3_window", "attention"), ("phi3_longrope", "every")])
def test_full_gradients_match_pytorch(leantune_bin, tmp_path, kind, ckpt):
    model = build_phi3(kind)
    folder = save(model, tmp_path / "base", kind)
    tokens = np.random.default_rng(4).integers(0, model.config.vocab_size, size=B * T)
    loss = hf_loss(model, tokens)
    loss.backward()
    ours_loss, grads = run_grad(leantune_bin, folder, tokens, tmp_path, ["--method", "full", "--checkpointing", ckpt])
    assert abs(ours_loss - loss.item()) <= 1e-4 * abs(loss.item())
    # leantune's gradients are per split projection: fuse them as the checkpoint stores the weights
    for l in range(model.config.num_hidden_layers):
        pre = f"model.layers.{l}."
        grads[pre + "self_attn.qkv_proj.weight"] = np.concatenate(
            [grads.pop(pre + f"self_attn.{m}.weight") for m in ("q_proj", "k_proj", "v_proj")])
        grads[pre + "mlp.gate_up_proj.weight"] = np.concatenate(
            [grads.pop(pre + f"mlp.{m}.weight") for m in ("gate_proj", "up_proj")])
    assert set(grads) == {n for n, _ in model.named_parameters()}
    for name, p in model.named_parameters():
        err = rel_err(grads[name], p.grad.numpy())
        assert err <= 1e-4, f"{name}: relative error {err:.3g}"


@pytest.mark.parametrize("saved", ["phi3"], indirect=True)
def test_we_load_a_peft_adapter(leantune_bin, tmp_path, saved):
    model, folder = saved
    pm = peft_model(model, 2, ["qkv_proj", "gate_up_proj", "down_proj"])
    pm.save_pretrained(tmp_path / "peft")
    ids = np.random.default_rng(3).integers(0, 320, size=PROMPT_LEN + DECODE_STEPS).tolist()
    ref = hf_logits(pm.eval(), ids)[:DECODE_STEPS]
    assert np.abs(ref - hf_logits(build_phi3(), ids)[:DECODE_STEPS]).max() > 1e-2
    ours = our_logits(leantune_bin, folder, ids, tmp_path, ("--adapter", str(tmp_path / "peft")))
    assert np.abs(ours.reshape(DECODE_STEPS, -1) - ref).max() <= 1e-4


WORDS = ["phi", "fused", "qkv", "rope"]


@pytest.mark.parametrize("saved", ["phi3"], indirect=True)
def test_peft_loads_our_adapter(leantune_bin, tmp_path, saved):
    _, folder = saved
    out = check_peft_loads_our_adapter(leantune_bin, tmp_path, folder, build_phi3, WORDS)
    cfg = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert sorted(cfg["target_modules"]) == sorted(PHI3_MODULES)
    keys = load_file(str(out / "adapter" / "adapter_model.safetensors"))
    assert keys["base_model.model.model.layers.0.self_attn.qkv_proj.lora_B.weight"].shape == (64 + 2 * 32, 4)


@pytest.mark.parametrize("saved", ["phi3"], indirect=True)
def test_full_fine_tune_folder_loads_in_transformers(leantune_bin, tmp_path, saved):
    from transformers import Phi3ForCausalLM
    _, folder = saved
    check_full_fine_tune_loads(leantune_bin, tmp_path, folder, Phi3ForCausalLM, WORDS,
                               "model.layers.0.self_attn.qkv_proj.weight", attn_implementation="eager")


@pytest.mark.parametrize("saved", ["phi3"], indirect=True)
def test_merged_adapter_is_a_fused_checkpoint(leantune_bin, tmp_path, saved):
    from transformers import Phi3ForCausalLM
    model, folder = saved
    # PEFT writes "all-linear" on a model this small (under 20 modules) as the module paths
    # model.layers.N.self_attn.qkv_proj, ...: read as PEFT matches them
    pm = peft_model(model, 4, "all-linear")
    pm.save_pretrained(tmp_path / "peft")
    targets = json.loads((tmp_path / "peft" / "adapter_config.json").read_text())["target_modules"]
    assert "model.layers.0.self_attn.qkv_proj" in targets
    r = subprocess.run([leantune_bin, "merge", "--model", str(folder), "--adapter", str(tmp_path / "peft"),
                        "--out", str(tmp_path / "merged")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    merged = Phi3ForCausalLM.from_pretrained(tmp_path / "merged", dtype=torch.float32,
                                             attn_implementation="eager").eval()
    ids = np.random.default_rng(8).integers(0, 320, size=PROMPT_LEN + DECODE_STEPS).tolist()
    assert np.abs(hf_logits(merged, ids) - hf_logits(pm.eval(), ids)).max() <= 1e-4


@pytest.mark.parametrize("mode", [("--quantization", "nf4"), ("--precision", "bf16"),
                                  ("--method", "full", "--gradient-checkpointing", "mlp")],
                         ids=["qlora_nf4", "lora_bf16", "full_mlp_ckpt"])


def test_training_modes_run_and_start_where_fp32_does(leantune_bin, tmp_path, mode):
    folder = save(build_phi3(), tmp_path / "base", "phi3")
    check_mode_starts_where_fp32_does(leantune_bin, tmp_path, folder, WORDS, mode,
                                      ("--lora-target-modules", "qkv_proj,gate_up_proj"))


def test_serve_engine_matches_transformers_with_a_peft_adapter(leantune_bin, tmp_path):
    """The serve batch engine (src/infer) on Phi-3, base and a fused-module PEFT adapter served unmerged."""
    from test_server import Server, hf_greedy
    from test_gguf_export import byte_level_tokenizer
    model = build_phi3(seed=3)
    folder = save(model, tmp_path / "base", "phi3")
    tok = byte_level_tokenizer(folder, 280)
    pm = peft_model(build_phi3(seed=3), 11, ["qkv_proj", "gate_up_proj", "down_proj"], r=4, alpha=8)
    pm.save_pretrained(tmp_path / "ad")
    srv = Server(leantune_bin, "--model", str(folder), "--served-model-name", "base", "--adapter",
                 f"ad={tmp_path / 'ad'}")
    try:
        for name, ref in [("base", model), ("ad", pm.eval())]:
            for p in ["The quick brown fox", "Once upon a time there was"]:
                want = hf_greedy(ref, tok, p, 12)
                r = srv.client.completions.create(model=name, prompt=p, max_tokens=12, temperature=0,
                                                  extra_body={"ignore_eos": True})
                assert r.choices[0].text == tok.decode(want), (name, p)
    finally:
        srv.close()


def test_refusals_name_the_variant(leantune_bin, tmp_path):
    folder = save(build_phi3(), tmp_path / "m", "phi3")
    tokens = np.zeros(B * T, dtype=np.int32)
    tok_file = tmp_path / "t.i32"
    tokens.tofile(tok_file)
    r = subprocess.run([leantune_bin, "grad", "--model", str(folder), "--tokens", str(tok_file), "--batch", str(B),
                        "--seq", str(T), "--out", str(tmp_path), "--lora-target-modules", "q_proj"],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "qkv_proj" in r.stderr and "q_proj" in r.stderr, r.stderr
    cfg = json.loads((folder / "config.json").read_text())
    cfg["partial_rotary_factor"] = 0.75
    (folder / "config.json").write_text(json.dumps(cfg))
    r = subprocess.run([leantune_bin, "logits", "--model", str(folder), "--ids", "1,2,3", "--out",
                        str(tmp_path / "l.f32")], capture_output=True, text=True)
    assert r.returncode != 0 and "partial_rotary_factor" in r.stderr, r.stderr

"""Gemma 2 and Gemma 3 (text) against transformers' Gemma2ForCausalLM / Gemma3ForCausalLM (eager
attention) and PEFT, random weights, fp32.

What sets them apart from Llama, each of it exercised here: embeddings times sqrt(hidden), RMSNorm
by (1 + w), four norms per layer (post-attention and post-feed-forward norms on the outputs before
the residual adds), GeGLU with the tanh gelu, query_pre_attn_scalar (32 here, head_dim 24),
sliding-window layers (window 16, over 80 tokens) alternating with global ones; Gemma 2's
attention and final logit soft-capping (caps lowered to 5 and 3 so that they bite on random
weights); Gemma 3's q_norm / k_norm, its layer_types pattern and its separate RoPE for local
layers (base 10000) and global ones (base 1e6, linear scaling x2 in `gemma3`).
"""
import json
import subprocess

import numpy as np
import pytest
import torch

from family_parity import check_full_fine_tune_loads, check_mode_starts_where_fp32_does, check_peft_loads_our_adapter
from test_model_parity import check, check_greedy, hf_logits, our_logits, PROMPT_LEN, DECODE_STEPS
from test_server import server_factory  # noqa: F401 (a fixture)

KINDS = ["gemma2", "gemma3"]
COMMON = dict(hidden_size=64, intermediate_size=160, num_hidden_layers=4, num_attention_heads=4,
              num_key_value_heads=2, head_dim=24, vocab_size=320, max_position_embeddings=512,
              query_pre_attn_scalar=32, sliding_window=16, attn_implementation="eager")


def randomize(model, seed):
    """Weights large enough that the logits carry signal; Gemma's norm weights are offsets from 1."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            scale = 0.2 if "norm" in name else 0.08
            p.copy_(scale * torch.randn(p.shape, generator=g))
    return model


def build(kind, seed=0):
    from transformers import Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig
    torch.manual_seed(seed)
    if kind == "gemma2":
        m = Gemma2ForCausalLM(Gemma2Config(**COMMON, attn_logit_softcapping=5.0, final_logit_softcapping=3.0))
    elif kind == "gemma3":
        m = Gemma3ForCausalLM(Gemma3TextConfig(**COMMON, sliding_window_pattern=3,
                                               rope_scaling={"rope_type": "linear", "factor": 2.0}))
    else:
        raise ValueError(kind)
    return randomize(m.eval(), seed + 1)


@pytest.fixture
def saved(tmp_path, request):
    model = build(request.param)
    folder = tmp_path / request.param
    model.save_pretrained(folder, safe_serialization=True)
    return model, folder


@pytest.mark.parametrize("saved", KINDS, indirect=True)
def test_logits_match_transformers(leantune_bin, tmp_path, saved):
    model, folder = saved
    check(leantune_bin, model, folder, tmp_path, seed=7)
    check(leantune_bin, model, folder, tmp_path, seed=8, extra=("--prefill-block", "7"))
    check(leantune_bin, model, folder, tmp_path, seed=9, extra=("--reference",))
    # a rolling KV cache on the sliding layers (context longer than window + block)
    check(leantune_bin, model, folder, tmp_path, seed=10, extra=("--prefill-block", "8", "--context", "128"))


@pytest.mark.parametrize("saved", KINDS, indirect=True)
def test_legacy_config_without_layer_types(leantune_bin, tmp_path, saved):
    """Configs written before transformers 5: no layer_types (Gemma 2 alternates, Gemma 3 follows
    sliding_window_pattern), Gemma 3's RoPE as rope_theta + rope_scaling + rope_local_base_freq."""
    model, folder = saved
    cfg = json.loads((folder / "config.json").read_text())
    del cfg["layer_types"]
    rp = cfg.pop("rope_parameters")
    if "full_attention" in rp:
        full, local = rp["full_attention"], rp["sliding_attention"]
        cfg["rope_theta"] = full.pop("rope_theta")
        cfg["rope_local_base_freq"] = local["rope_theta"]
        full["type"] = full.pop("rope_type")
        cfg["rope_scaling"] = full
    else:
        cfg["rope_theta"] = rp["rope_theta"]
    (folder / "config.json").write_text(json.dumps(cfg))
    check(leantune_bin, model, folder, tmp_path, seed=12)


@pytest.mark.parametrize("saved", KINDS, indirect=True)
def test_greedy_generation_matches_transformers(leantune_bin, tmp_path, saved):
    model, folder = saved
    prompt = np.random.default_rng(10).integers(0, 256, size=12).tolist()
    check_greedy(leantune_bin, model, folder, tmp_path, prompt, n=64)


@pytest.mark.parametrize("kind", KINDS)
def test_each_gemma_feature_matters(kind):
    """Not a vacuous pass: changing any one Gemma-specific setting moves transformers' logits, so
    the parity above holds only with each of them implemented."""
    ids = np.random.default_rng(7).integers(0, 320, size=PROMPT_LEN + DECODE_STEPS).tolist()
    base = hf_logits(build(kind), ids)
    changes = {"query_pre_attn_scalar": 24, "sliding_window": 4096}
    if kind == "gemma2":
        changes.update(attn_logit_softcapping=None, final_logit_softcapping=None)
    else:
        changes.update(rope_local_base_freq=1e6)
    for key, value in changes.items():
        m = build(kind)
        if key == "rope_local_base_freq":
            m.config.rope_parameters["sliding_attention"]["rope_theta"] = value
            m2 = type(m)(m.config)
            m2.load_state_dict(m.state_dict())
            m = m2.eval()
        else:
            setattr(m.config, key, value)
            for layer in m.model.layers:
                setattr(layer.self_attn.config if hasattr(layer.self_attn, "config") else layer.self_attn, key, value)
                if key == "query_pre_attn_scalar":
                    layer.self_attn.scaling = value ** -0.5
                if key == "attn_logit_softcapping":
                    layer.self_attn.attn_logit_softcapping = value
        assert np.abs(hf_logits(m, ids) - base).max() > 1e-3, key


def test_gemma3_multimodal_config_is_refused_by_name(leantune_bin, tmp_path):
    folder = tmp_path / "g3"
    build("gemma3").save_pretrained(folder, safe_serialization=True)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["model_type"] = "gemma3"
    (folder / "config.json").write_text(json.dumps(cfg))
    r = subprocess.run([leantune_bin, "logits", "--model", str(folder), "--ids", "1,2,3", "--out",
                        str(tmp_path / "l.f32")], capture_output=True, text=True)
    assert r.returncode != 0 and "gemma3_text" in r.stderr, r.stderr


# ---- training -------------------------------------------------------------------------------------

def lora_grads_match(leantune_bin, tmp_path, kind, ckpt, extra=()):
    from peft import LoraConfig, get_peft_model
    from test_train_parity import MODULES, B, T, hf_loss, rel_err, run_grad
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
                                 "--checkpointing", ckpt, *extra])
    assert abs(ours_loss - loss.item()) <= 1e-4 * abs(loss.item())
    n = 0
    for name, p in pm.named_parameters():
        if p.requires_grad:
            key = name.replace(".default", "")
            err = rel_err(grads[key], p.grad.numpy())
            assert err <= 1e-4, f"{key}: relative error {err:.3g}"
            n += 1
    assert n == len(grads) == 2 * 7 * model.config.num_hidden_layers


@pytest.mark.parametrize("kind,ckpt", [("gemma2", "none"), ("gemma2", "attention"), ("gemma3", "none"),
                                       ("gemma3", "mlp"), ("gemma2", "every")])


def test_lora_gradients_match_peft(leantune_bin, tmp_path, kind, ckpt):
    lora_grads_match(leantune_bin, tmp_path, kind, ckpt)


@pytest.mark.parametrize("kind,ckpt", [("gemma2", "none"), ("gemma3", "none"), ("gemma2", "attention")])
def test_full_gradients_match_pytorch(leantune_bin, tmp_path, kind, ckpt):
    from test_train_parity import B, T, hf_loss, rel_err, run_grad
    model = build(kind)
    folder = tmp_path / "base"
    model.save_pretrained(folder, safe_serialization=True)
    tokens = np.random.default_rng(4).integers(0, model.config.vocab_size, size=B * T)
    loss = hf_loss(model, tokens)
    loss.backward()
    ours_loss, grads = run_grad(leantune_bin, folder, tokens, tmp_path, ["--method", "full", "--checkpointing", ckpt])
    assert abs(ours_loss - loss.item()) <= 1e-4 * abs(loss.item())
    names = {n for n, _ in model.named_parameters()}
    assert set(grads) == names and "model.layers.1.post_feedforward_layernorm.weight" in names
    for name, p in model.named_parameters():
        err = rel_err(grads[name], p.grad.numpy())
        assert err <= 1e-4, f"{name}: relative error {err:.3g}"


@pytest.mark.parametrize("saved", KINDS, indirect=True)
def test_we_load_a_peft_adapter(leantune_bin, tmp_path, saved):
    from peft import LoraConfig, get_peft_model
    model, folder = saved
    kind = folder.name
    torch.manual_seed(2)
    pm = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, init_lora_weights=False, task_type="CAUSAL_LM",
                                          target_modules=["q_proj", "k_proj", "v_proj", "down_proj"]))
    pm.save_pretrained(tmp_path / "peft")
    ids = np.random.default_rng(3).integers(0, 320, size=PROMPT_LEN + DECODE_STEPS).tolist()
    ref = hf_logits(pm.eval(), ids)[:DECODE_STEPS]
    assert np.abs(ref - hf_logits(build(kind), ids)[:DECODE_STEPS]).max() > 1e-2
    ours = our_logits(leantune_bin, folder, ids, tmp_path, ("--adapter", str(tmp_path / "peft")))
    assert np.abs(ours.reshape(DECODE_STEPS, -1) - ref).max() <= 1e-4


WORDS = ["gemma", "norm", "cap", "rope"]


@pytest.mark.parametrize("saved", KINDS, indirect=True)
def test_peft_loads_our_adapter(leantune_bin, tmp_path, saved):
    _, folder = saved
    check_peft_loads_our_adapter(leantune_bin, tmp_path, folder, lambda: build(folder.name), WORDS)


@pytest.mark.parametrize("saved", KINDS, indirect=True)
def test_full_fine_tune_folder_loads_in_transformers(leantune_bin, tmp_path, saved):
    from transformers import AutoModelForCausalLM
    _, folder = saved
    check_full_fine_tune_loads(leantune_bin, tmp_path, folder, AutoModelForCausalLM, WORDS,
                               "model.layers.0.post_feedforward_layernorm.weight", attn_implementation="eager")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", [("--quantization", "nf4", "--double-quant", "true"), ("--precision", "bf16"),
                                  ("--method", "full", "--precision", "bf16", "--gradient-checkpointing", "mlp")],
                         ids=["qlora_nf4", "lora_bf16", "full_bf16_mlp_ckpt"])


def test_training_modes_run_and_start_where_fp32_does(leantune_bin, tmp_path, kind, mode):
    folder = tmp_path / "base"
    build(kind).save_pretrained(folder, safe_serialization=True)
    check_mode_starts_where_fp32_does(leantune_bin, tmp_path, folder, WORDS, mode)


@pytest.mark.parametrize("kind", KINDS)
def test_served_greedy_tokens_match_transformers(server_factory, tmp_path, kind):
    """The serve batch engine (src/infer/batch_forward.cpp) on Gemma, the base and a LoRA adapter
    applied unmerged: greedy completions equal transformers' (+ PEFT's), alone and batched."""
    import concurrent.futures
    from peft import LoraConfig, get_peft_model
    from test_server import PROMPTS, byte_level_tokenizer, hf_greedy
    model = build(kind, seed=3)
    model.save_pretrained(tmp_path / "base", safe_serialization=True)
    tok = byte_level_tokenizer(tmp_path / "base", 280)
    torch.manual_seed(11)
    pm = get_peft_model(build(kind, seed=3), LoraConfig(r=4, lora_alpha=8, target_modules="all-linear",
                                                        init_lora_weights=False))
    pm.save_pretrained(tmp_path / "alpha")
    srv = server_factory("--model", str(tmp_path / "base"), "--served-model-name", "base",
                         "--adapter", f"alpha={tmp_path / 'alpha'}")
    jobs = [(name, p) for name in ("base", "alpha") for p in PROMPTS[:2]]
    refs = {"base": model.eval(), "alpha": pm.eval()}

    def run(job):
        r = srv.client.completions.create(model=job[0], prompt=job[1], max_tokens=16, temperature=0,
                                          extra_body={"ignore_eos": True})
        return r.choices[0].text

    want = [tok.decode(hf_greedy(refs[name], tok, p, 16)) for name, p in jobs]
    assert [run(j) for j in jobs] == want
    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as ex:
        assert list(ex.map(run, jobs)) == want

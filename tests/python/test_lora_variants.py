# PEFT's LoRA variants against PEFT itself (the oracle) on random-weight HF models: LoRA+ (the
# optimizer of peft.optimizers.create_loraplus_optimizer, three AdamW steps), DoRA (use_dora: loss,
# the gradients of A, B and the magnitude, and the initial magnitude), PiSSA and OLoRA
# initialisation (init_lora_weights: A, B, the residual base weight, the loss and the gradients),
# and adapters trained here with each variant loading in PEFT on the unmodified base model (PiSSA /
# OLoRA converted to plain LoRA as PEFT's path_initial_model_for_weight_conversion does) with the
# logits we compute for them, and merging into a folder transformers loads.
import json
import subprocess

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from test_bias_parity import add_tokenizer_and_data, build_biased
from test_model_parity import build, hf_logits, our_logits, PROMPT_LEN, DECODE_STEPS
from test_train_parity import B, T, MODULES, hf_loss, rel_err, run_grad

MAG = "lora_magnitude_vector"


def peft_key(name):
    """A PEFT parameter name as we (and PEFT's saved files) name the tensor."""
    key = name.replace(".default", "")
    return key[: -len(".weight")] if key.endswith(MAG + ".weight") else key


def save_base(model, tmp_path):
    folder = tmp_path / "base"
    model.save_pretrained(folder, safe_serialization=True)
    return folder


# ---- LoRA+ ---------------------------------------------------------------------------------------

def peft_steps(pm, tokens, opt, steps):
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = hf_loss(pm, tokens)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("use_dora", [False, True])
def test_loraplus_matches_create_loraplus_optimizer_after_3_steps(leantune_bin, tmp_path, use_dora):
    from peft import LoraConfig, get_peft_model
    from peft.optimizers import create_loraplus_optimizer
    model = build_biased()  # biases with bias="all": PEFT's groupB_no_decay (lr · ratio, no decay)
    folder = save_base(model, tmp_path)
    cfg = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=MODULES, init_lora_weights=False,
                     bias="all", use_dora=use_dora, task_type="CAUSAL_LM")
    torch.manual_seed(5)
    pm = get_peft_model(model, cfg)
    adir = tmp_path / "adapter"
    pm.save_pretrained(adir)
    tokens = np.random.default_rng(3).integers(0, 300, size=B * T)
    lr, ratio, wd = 1e-3, 16.0, 0.01
    opt = create_loraplus_optimizer(pm, torch.optim.AdamW, lr=lr, loraplus_lr_ratio=ratio, loraplus_weight_decay=wd)
    peft_losses = peft_steps(pm, tokens, opt, 3)
    extra = ["--adapter", str(adir), "--lora-r", "8", "--lora-alpha", "16", "--lora-bias", "all", "--adamw-lr",
             str(lr), "--adamw-steps", "3", "--loraplus-lr-ratio", str(ratio), "--weight-decay", str(wd)]
    if use_dora:
        extra.append("--use-dora")
    run_grad(leantune_bin, folder, tokens, tmp_path, extra)
    ours = load_file(str(tmp_path / "params.safetensors"))
    init = load_file(str(adir / "adapter_model.safetensors"))
    our_losses = [float(x) for x in (tmp_path / "losses.txt").read_text().split()]
    # the losses of the three passes (the third after two updates) within 1e-4 relative, as the
    # single-pass parity tests; the parameters after three updates within 1e-5: each update moves
    # an element by about lr·ratio = 1.6e-2, AdamW's normalised step, which the 1e-4 relative
    # gradient agreement perturbs by ~1e-6 (far below 1e-5) except for elements whose gradient is
    # near zero (step = g / (|g| + eps)); this batch and seed have none within reach (max shown).
    np.testing.assert_allclose(our_losses, peft_losses, rtol=1e-4)
    n_b = n_bias = 0
    worst = 0.0
    for name, p in pm.named_parameters():
        if not p.requires_grad:
            continue
        key = peft_key(name)
        if key.endswith(".bias"):
            key = key.replace("base_model.model.", "", 1).replace(".base_layer", "")
            n_bias += 1
        diff = float(np.abs(ours[key] - p.detach().numpy()).max())
        worst = max(worst, diff)
        assert diff <= 1e-5, f"{key}: max abs diff {diff:.3g} after 3 LoRA+ steps"
        n_b += "lora_B" in key
    assert n_b == 14 and n_bias == 14
    # LoRA+ mattered: B and the biases moved ~ratio times further than A would at the same lr
    key_b = "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"
    plain_b = init[key_b].astype(np.float64)
    assert np.abs(ours[key_b] - plain_b).max() > 5 * lr, "lora_B did not take LoRA+ steps"
    print(f"LoRA+ (dora={use_dora}): worst parameter difference after 3 steps {worst:.2e}")


# ---- DoRA ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind,ckpt", [("llama3", "none"), ("qwen2", "every")])
def test_dora_loss_and_gradients_match_peft(leantune_bin, tmp_path, kind, ckpt):
    from peft import LoraConfig, get_peft_model
    model = build(kind)
    folder = save_base(model, tmp_path)
    cfg = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=MODULES, init_lora_weights=False,
                     use_dora=True, task_type="CAUSAL_LM")
    torch.manual_seed(5)
    pm = get_peft_model(model, cfg)
    adir = tmp_path / "adapter"
    pm.save_pretrained(adir)
    saved = load_file(str(adir / "adapter_model.safetensors"))
    assert "base_model.model.model.layers.0.self_attn.q_proj." + MAG in saved
    tokens = np.random.default_rng(3).integers(0, model.config.vocab_size, size=B * T)
    loss = hf_loss(pm, tokens)
    loss.backward()
    ours_loss, grads = run_grad(leantune_bin, folder, tokens, tmp_path,
                                ["--adapter", str(adir), "--lora-r", "8", "--lora-alpha", "16", "--use-dora",
                                 "--checkpointing", ckpt])
    # 1e-4 relative, as the plain LoRA parity test: f32 on both sides, sums reordered
    assert abs(ours_loss - loss.item()) <= 1e-4 * abs(loss.item())
    n = 0
    for name, p in pm.named_parameters():
        if not p.requires_grad:
            continue
        key = peft_key(name)
        err = rel_err(grads[key], p.grad.numpy())
        assert err <= 1e-4, f"{key}: relative error {err:.3g}"
        n += 1
    assert n == len(grads) == 3 * 7 * model.config.num_hidden_layers
    # the magnitudes' gradients are real (PEFT's norm is detached: m's gradient is ⟨dout, V·x⟩ / ‖V‖)
    assert np.abs(grads["base_model.model.model.layers.0.mlp.down_proj." + MAG]).max() > 1e-5


def test_dora_fresh_magnitude_is_the_row_norm_as_peft(leantune_bin, tmp_path):
    from peft import LoraConfig, get_peft_model
    model = build("llama3")
    folder = save_base(model, tmp_path)
    pm = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=MODULES, use_dora=True))
    tokens = np.random.default_rng(3).integers(0, model.config.vocab_size, size=B * T)
    run_grad(leantune_bin, folder, tokens, tmp_path, ["--lora-r", "4", "--lora-alpha", "8", "--use-dora"])
    init = load_file(str(tmp_path / "init.safetensors"))
    n = 0
    for name, p in pm.named_parameters():
        if MAG in name:
            np.testing.assert_allclose(init[peft_key(name)], p.detach().numpy(), rtol=1e-6)
            n += 1
    assert n == 7 * model.config.num_hidden_layers


# ---- PiSSA and OLoRA -----------------------------------------------------------------------------

def align_signs(ours_A, ours_B, peft_A):
    """PiSSA's singular pairs are unique up to a common sign flip of (u_i, v_i), i.e. of row i of A
    and column i of B; LAPACK (torch) and our Jacobi SVD may pick different ones."""
    s = np.sign(np.sum(ours_A * peft_A, axis=1))
    s[s == 0] = 1
    return s[:, None] * ours_A, ours_B * s[None, :], s


def spiked(model, seed=11):
    """Each projection weight plus twelve rank-one spikes of strengths 4.0, 3.75, ..., 1.25: random
    weights have a flat top spectrum (σ_{i+1} / σ_i ~ 0.99), where a singular vector computed in f32
    (torch's, which PEFT uses) is only good to ~1e-4 and the comparison would measure torch's
    rounding; trained weights' spectra decay, and with these gaps f32 vectors are good to ~1e-6."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim != 2 or "embed" in name or "lm_head" in name:
                continue
            u, _ = torch.linalg.qr(torch.randn(p.shape[0], 12, generator=g, dtype=torch.float64))
            v, _ = torch.linalg.qr(torch.randn(p.shape[1], 12, generator=g, dtype=torch.float64))
            sv = torch.tensor([4.0 - 0.25 * i for i in range(12)], dtype=torch.float64)
            p.add_(((u * sv) @ v.T).float())
    return model


@pytest.mark.parametrize("init", ["pissa", "olora"])
def test_pissa_olora_init_loss_and_gradients_match_peft(leantune_bin, tmp_path, init):
    from peft import LoraConfig, get_peft_model
    model = spiked(build("llama3"))
    folder = save_base(model, tmp_path)
    base_w = {n: p.detach().numpy().copy() for n, p in model.named_parameters()}
    pm = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=MODULES, init_lora_weights=init))
    tokens = np.random.default_rng(3).integers(0, model.config.vocab_size, size=B * T)
    loss = hf_loss(pm, tokens)
    loss.backward()
    ours_loss, grads = run_grad(leantune_bin, folder, tokens, tmp_path,
                                ["--lora-r", "8", "--lora-alpha", "16", "--init-lora-weights", init])
    ours = load_file(str(tmp_path / "init.safetensors"))
    # the loss is the base model's on both sides (W_res + s·B·A = W): 1e-4 relative as above
    assert abs(ours_loss - loss.item()) <= 1e-4 * abs(loss.item())
    params = dict(pm.named_parameters())
    worst = {"A": 0.0, "B": 0.0, "W_res": 0.0, "dA": 0.0, "dB": 0.0}
    for name, p in params.items():
        if "lora_A" not in name:
            continue
        a_key = peft_key(name)
        b_name = name.replace("lora_A", "lora_B")
        b_key = peft_key(b_name)
        pa, pb = p.detach().numpy(), params[b_name].detach().numpy()
        oa, ob, s = align_signs(ours[a_key], ours[b_key], pa) if init == "pissa" else (ours[a_key], ours[b_key], None)
        # A and B: torch factorizes in f32, we in double; the spiked weights' top singular vectors
        # are well separated, so both are within ~1e-6 relative of the exact factors
        worst["A"] = max(worst["A"], rel_err(oa, pa))
        worst["B"] = max(worst["B"], rel_err(ob, pb))
        w_name = a_key.replace("base_model.model.", "", 1).replace(".lora_A.weight", ".weight")
        peft_w = params[name.replace("lora_A.default", "base_layer")].detach().numpy()
        worst["W_res"] = max(worst["W_res"], float(np.abs(ours[w_name] - peft_w).max()))
        assert np.abs(peft_w - base_w[w_name]).max() > 1e-3, "PEFT did not modify the base weight"
        ga, gb = grads[a_key], grads[b_key]
        if s is not None:
            ga, gb = s[:, None] * ga, gb * s[None, :]
        worst["dA"] = max(worst["dA"], rel_err(ga, p.grad.numpy()))
        worst["dB"] = max(worst["dB"], rel_err(gb, params[b_name].grad.numpy()))
    print(f"{init}: {worst}")
    assert worst["A"] <= 1e-4 and worst["B"] <= 1e-4, worst
    assert worst["W_res"] <= 1e-5, worst  # |W| ~ 0.3: f32 rounding of W − s·B·A
    assert worst["dA"] <= 1e-4 and worst["dB"] <= 1e-4, worst


def test_pissa_niter_is_a_randomized_pissa(leantune_bin, tmp_path):
    # pissa_niter_K draws its Ω from our generator, not torch's, so its numbers are not torch's (see
    # core/linalg.h); what it must be: an exact split of W (W_res + s·B·A = W, the base loss) whose
    # factors approach the exact PiSSA ones as K grows
    model = build("llama3")
    folder = save_base(model, tmp_path)
    tokens = np.random.default_rng(3).integers(0, model.config.vocab_size, size=B * T)
    base_loss = hf_loss(model, tokens).item()
    exact_dir, rand_dir = tmp_path / "exact", tmp_path / "rand"
    for d, init in ((exact_dir, "pissa"), (rand_dir, "pissa_niter_16")):
        d.mkdir()
        loss, _ = run_grad(leantune_bin, folder, tokens, d, ["--lora-r", "4", "--lora-alpha", "8",
                                                              "--init-lora-weights", init])
        assert abs(loss - base_loss) <= 1e-4 * base_loss
    exact, rand = load_file(str(exact_dir / "init.safetensors")), load_file(str(rand_dir / "init.safetensors"))
    for key in exact:
        if "lora_A" in key:
            # the rows of A carry sqrt(σ_i / s)·v_i, so their squared norms are the singular values.
            # A randomized range finder's are Ritz values: never above the exact ones, and on these
            # random weights' flat spectra (σ_5 / σ_4 ~ 0.99, torch's svd_lowrank has no oversampling
            # either) 16 iterations bring them within a few percent
            se, sr = np.linalg.norm(exact[key], axis=1) ** 2, np.linalg.norm(rand[key], axis=1) ** 2
            assert np.all(sr <= se * (1 + 1e-5)) and np.all(sr >= 0.95 * se), (key, sr, se)


# ---- adapters trained here, in PEFT --------------------------------------------------------------

VARIANTS = {
    "dora": ["--use-dora", "true"],
    "pissa": ["--init-lora-weights", "pissa"],
    "olora": ["--init-lora-weights", "olora"],
    "pissa_dora": ["--init-lora-weights", "pissa", "--use-dora", "true"],
    "loraplus_dora_dropout": ["--loraplus-lr-ratio", "8", "--use-dora", "true", "--lora-dropout", "0.1"],
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_trained_adapter_loads_in_peft_on_the_original_base(leantune_bin, tmp_path, variant):
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import LlamaForCausalLM
    folder = tmp_path / "base"
    build_biased().save_pretrained(folder, safe_serialization=True)
    data = add_tokenizer_and_data(folder, tmp_path)
    out = tmp_path / "out"
    r = subprocess.run([leantune_bin, "train", "--base-model", str(folder), "--datasets", str(data), "--max-steps",
                        "4", "--learning-rate", "1e-2", "--micro-batch-size", "2", "--sequence-len", "32",
                        "--threads", "1", "--output-dir", str(out), "--lora-r", "4", "--lora-alpha", "8",
                        "--lora-target-modules", "q_proj,v_proj,o_proj,up_proj,down_proj", *VARIANTS[variant]],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    adir = out / "adapter"
    cfg = json.loads((adir / "adapter_config.json").read_text())
    mutated = "pissa" in variant or "olora" in variant
    assert cfg["use_dora"] == ("dora" in variant)
    assert cfg["init_lora_weights"] is True and cfg["r"] == (8 if mutated else 4)
    ids = np.random.default_rng(6).integers(0, 290, size=PROMPT_LEN + DECODE_STEPS).tolist()
    pm = PeftModel.from_pretrained(build_biased(), str(adir)).eval()
    ref = hf_logits(pm, ids)[:DECODE_STEPS]
    assert np.abs(hf_logits(build_biased(), ids)[:DECODE_STEPS] - ref).max() > 1e-2, "training changed nothing"
    # our logits with the adapter PEFT loaded: 1e-4 as the other parity tests (f32 on both sides)
    ours = our_logits(leantune_bin, folder, ids, tmp_path, ("--adapter", str(adir))).reshape(DECODE_STEPS, -1)
    assert np.abs(ours - ref).max() <= 1e-4
    if mutated:
        # the converted adapter is what PEFT's own PiSSA / OLoRA model computes with the trained A, B
        # (the first r rows / columns) on PEFT's residual base: our residual is PEFT's
        saved = load_file(str(adir / "adapter_model.safetensors"))
        init = "olora" if "olora" in variant else "pissa"
        own = get_peft_model(build_biased(), LoraConfig(r=4, lora_alpha=8, init_lora_weights=init,
                                                        use_dora="dora" in variant,
                                                        target_modules=["q_proj", "v_proj", "o_proj", "up_proj",
                                                                        "down_proj"]))
        with torch.no_grad():
            for name, p in own.named_parameters():
                key = peft_key(name)
                if "lora_A" in key:
                    p.copy_(torch.from_numpy(saved[key][:4]))
                elif "lora_B" in key:
                    p.copy_(torch.from_numpy(saved[key][:, :4]))
                elif MAG in key:
                    p.copy_(torch.from_numpy(saved[key]))
        np.testing.assert_allclose(hf_logits(own.eval(), ids)[:DECODE_STEPS], ref, atol=1e-4)
    # merged into a folder transformers loads (DoRA: the rows rescaled by m / ‖W + s·B·A‖)
    r = subprocess.run([leantune_bin, "merge", "--model", str(folder), "--adapter", str(adir), "--out",
                        str(tmp_path / "merged")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    merged = LlamaForCausalLM.from_pretrained(tmp_path / "merged", dtype=torch.float32).eval()
    assert np.abs(hf_logits(merged, ids)[:DECODE_STEPS] - ref).max() <= 1e-4


def test_adapter_in_pissa_form_is_refused(leantune_bin, tmp_path):
    # PEFT saved without conversion: A, B for W − s·B₀·A₀, which only PEFT's re-initialisation on
    # load reproduces; we say so instead of computing with the wrong base
    from peft import LoraConfig, get_peft_model
    model = build("llama3")
    folder = save_base(model, tmp_path)
    pm = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=MODULES, init_lora_weights="pissa"))
    pm.save_pretrained(tmp_path / "adapter")
    r = subprocess.run([leantune_bin, "logits", "--model", str(folder), "--adapter", str(tmp_path / "adapter"),
                        "--ids", "1,2,3", "--out", str(tmp_path / "l.f32")], capture_output=True, text=True)
    assert r.returncode == 1 and "path_initial_model_for_weight_conversion" in r.stderr, r.stderr

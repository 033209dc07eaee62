# Adaptive LoRA rank (`lora_rank_policy: adaptive`, train/adaptive_rank.h) end to end: a short run on
# a random-weight HF Llama saves an adapter whose per-module ranks (rank_pattern) sum to the final
# budget exactly and whose alpha_pattern keeps the trained scale; PEFT loads it on the base and
# computes the logits we compute with the untruncated factors (the final checkpoint's, masked
# components zero) within 1e-4, and so does our own loader reading the rank_pattern adapter. On stories260K / Aesop a run killed after a checkpoint in the middle
# of the pruning window and resumed repeats the uninterrupted run bit for bit (the checkpoint holds
# the masks and the importance EMAs), and `leantune plan` shows the memory at both ranks.
import json
import os
import subprocess

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from test_bias_parity import add_tokenizer_and_data, build_biased
from test_model_parity import hf_logits, our_logits, PROMPT_LEN, DECODE_STEPS

MODULES = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"


def untruncated_adapter(out, adir, dst):
    """The final checkpoint's LoRA factors (rank lora_r, masked components zero) as a fixed-rank adapter."""
    latest = (out / "LATEST").read_text().strip()
    state = load_file(str(out / latest / "state.safetensors"))
    params = {k[len("param."):]: v for k, v in state.items() if k.startswith("param.")}
    cfg = json.loads((adir / "adapter_config.json").read_text())
    cfg["rank_pattern"], cfg["alpha_pattern"] = {}, {}
    dst.mkdir()
    (dst / "adapter_config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True))
    save_file(params, str(dst / "adapter_model.safetensors"), metadata={"format": "pt"})
    return params, state


@pytest.mark.parametrize("importance", ["sensitivity", "variance"])
def test_adaptive_adapter_loads_in_peft_with_our_logits(leantune_bin, tmp_path, importance):
    from peft import PeftModel
    folder = tmp_path / "base"
    build_biased().save_pretrained(folder, safe_serialization=True)
    data = add_tokenizer_and_data(folder, tmp_path)
    out = tmp_path / "out"
    r0, r1, steps = 6, 2, 8
    r = subprocess.run([leantune_bin, "train", "--base-model", str(folder), "--datasets", str(data), "--max-steps",
                        str(steps), "--learning-rate", "1e-2", "--micro-batch-size", "2", "--sequence-len", "32",
                        "--threads", "1", "--output-dir", str(out), "--lora-r", str(r0), "--lora-alpha", "12",
                        "--lora-target-modules", MODULES, "--lora-rank-policy", "adaptive", "--lora-target-r", str(r1),
                        "--lora-rank-importance", importance, "--lora-rank-tinit", "2", "--lora-rank-tfinal", "2"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "adaptive rank: total rank" in r.stdout
    adir = out / "adapter"
    cfg = json.loads((adir / "adapter_config.json").read_text())
    saved = load_file(str(adir / "adapter_model.safetensors"))
    n_modules = build_biased().config.num_hidden_layers * 7
    assert cfg["r"] == r0 and len(cfg["rank_pattern"]) > 0
    ranks = {}
    for key in saved:
        if ".lora_A." in key:
            module = key[len("base_model.model."):-len(".lora_A.weight")]
            ranks[module] = saved[key].shape[0]
            assert saved[key.replace("lora_A", "lora_B")].shape[1] == ranks[module]
    assert len(ranks) == n_modules
    assert sum(ranks.values()) == r1 * n_modules  # the final budget, exactly
    for module, k in ranks.items():
        assert cfg["rank_pattern"].get(module, r0) == k
        alpha = cfg["alpha_pattern"].get(module, cfg["lora_alpha"])
        assert abs(alpha / k - 12 / r0) < 1e-6  # the scale training used
    # the metrics record the total rank step by step: never rising, the budget at the end
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    totals = [rec["lora_rank_total"] for rec in recs if "lora_rank_total" in rec]
    assert len(totals) == steps and totals[0] == r0 * n_modules and totals[-1] == r1 * n_modules
    assert all(a >= b for a, b in zip(totals, totals[1:]))
    ledger = json.loads((out / "ledger.json").read_text())["adaptive_rank"]
    assert ledger["total_rank_final"] == r1 * n_modules and ledger["lora_params_final"] < ledger["lora_params_init"]
    # the checkpoint's masked components are exactly zero in both factors and their moments
    params, state = untruncated_adapter(out, adir, tmp_path / "full_rank")
    zero_rows = 0
    for key, a in params.items():
        if ".lora_A." not in key:
            continue
        b = params[key.replace("lora_A", "lora_B")]
        dead = [i for i in range(r0) if not a[i].any()]
        zero_rows += len(dead)
        for i in dead:
            assert not b[:, i].any()
        # released at the final budget: the moments hold only the active components, the EMAs are gone
        for pre in ("adam_m.", "adam_v."):
            assert state[pre + key].shape == (r0 - len(dead), a.shape[1])
            assert state[pre + key.replace("lora_A", "lora_B")].shape == (b.shape[0], r0 - len(dead))
    assert zero_rows == (r0 - r1) * n_modules
    assert not any(k.startswith("rank_ema") for k in state)
    ids = np.random.default_rng(6).integers(0, 290, size=PROMPT_LEN + DECODE_STEPS).tolist()
    pm = PeftModel.from_pretrained(build_biased(), str(adir)).eval()
    ref = hf_logits(pm, ids)[:DECODE_STEPS]
    assert np.abs(hf_logits(build_biased(), ids)[:DECODE_STEPS] - ref).max() > 1e-2, "training changed nothing"
    ours = our_logits(leantune_bin, folder, ids, tmp_path, ("--adapter", str(tmp_path / "full_rank")))
    assert np.abs(ours.reshape(DECODE_STEPS, -1) - ref).max() <= 1e-4
    # our own loader reads the rank_pattern adapter too (padded to rank r, the same function)
    ours = our_logits(leantune_bin, folder, ids, tmp_path, ("--adapter", str(adir)))
    assert np.abs(ours.reshape(DECODE_STEPS, -1) - ref).max() <= 1e-4


def aesop_args(shared_dir, out, *extra):
    return ["--base_model", str(shared_dir / "models/stories260K/stories260K.bin"),
            "--tokenizer", str(shared_dir / "models/stories260K/tok512.bin"),
            "--datasets", str(shared_dir / "data/aesop_fables/aesop_fables.txt"),
            "--method", "lora", "--lora_r", "8", "--lora_alpha", "16", "--lora_target_modules", "all-linear",
            "--micro_batch_size", "4", "--sequence_len", "64", "--max_steps", "12", "--learning_rate", "3e-3",
            "--eval_batches", "2", "--threads", "1", "--seed", "5", "--output_dir", str(out),
            "--lora_rank_policy", "adaptive", "--lora_target_r", "3", "--lora_rank_tinit", "2",
            "--lora_rank_tfinal", "3", "--lora_rank_delta_t", "2", *extra]


def losses(out):
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in recs if "loss" in r and "eval_loss" not in r], [r.get("lora_rank_total") for r in recs
                                                                              if "loss" in r and "eval_loss" not in r]


def test_resume_mid_pruning_repeats_the_uninterrupted_run(leantune_bin, fault_bin, shared_dir, tmp_path):
    full = tmp_path / "full"
    r = subprocess.run([leantune_bin, "train", *aesop_args(shared_dir, full)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    cut = tmp_path / "cut"
    r = subprocess.run([fault_bin, "--fault-abort-after-checkpoint", "6",
                        *aesop_args(shared_dir, cut, "--save_steps", "6")], capture_output=True, text=True)
    assert r.returncode != 0 and (cut / "checkpoint-6").is_dir()
    state = load_file(str(cut / "checkpoint-6" / "state.safetensors"))
    masks = [v for k, v in state.items() if k.startswith("rank_mask.")]
    assert len(masks) == 5 * 7 and 3 * 35 < sum(int(m.sum()) for m in masks) < 8 * 35  # mid-window
    r = subprocess.run([leantune_bin, "train", *aesop_args(shared_dir, cut, "--save_steps", "6", "--resume", "auto")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lf, tf = losses(full)
    lc, tc = losses(cut)
    assert lc == lf and tc == tf
    assert tf[-1] == 3 * 35
    a = load_file(str(full / "adapter" / "adapter_model.safetensors"))
    b = load_file(str(cut / "adapter" / "adapter_model.safetensors"))
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    assert (full / "adapter" / "adapter_config.json").read_text() == (cut / "adapter" / "adapter_config.json").read_text()


def test_release_keeps_the_bits_within_the_plans_bound(leantune_bin, fault_bin, shared_dir, tmp_path):
    """At the final budget the optimizer state is compacted and its tail released: the losses equal
    those of the masked run without release (the internal switch), the measured optimizer state after
    the release is within `leantune plan`'s bound and below the figure before, and a run killed after
    the release (checkpoint 10 of 12; the budget is final from step 9) resumes to the same bits."""
    full = tmp_path / "full"
    r = subprocess.run([leantune_bin, "train", *aesop_args(shared_dir, full)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    keep = tmp_path / "keep"
    env = dict(os.environ, LEANTUNE_RANK_NO_RELEASE="1")
    r = subprocess.run([leantune_bin, "train", *aesop_args(shared_dir, keep)], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert losses(full) == losses(keep)
    a = load_file(str(full / "adapter" / "adapter_model.safetensors"))
    b = load_file(str(keep / "adapter" / "adapter_model.safetensors"))
    assert all(np.array_equal(a[k], b[k]) for k in a)
    led = json.loads((full / "ledger.json").read_text())["adaptive_rank"]
    assert led["released"] and led["release_step"] == 9 and led["released_bytes"] > 0
    assert not json.loads((keep / "ledger.json").read_text())["adaptive_rank"]["released"]
    r = subprocess.run([leantune_bin, "plan", *aesop_args(shared_dir, tmp_path / "p"), "--json"], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)["adaptive_rank"]
    bound = plan["optimizer_bytes_after_release_bound"]
    assert led["optimizer_resident_after_release"] <= led["optimizer_bytes_after_release"] + 4095
    assert led["optimizer_resident_after_release"] <= bound < plan["optimizer_bytes_init"]
    assert led["optimizer_resident_after_release"] < led["optimizer_resident_before_release"]
    cut = tmp_path / "cut"
    r = subprocess.run([fault_bin, "--fault-abort-after-checkpoint", "10",
                        *aesop_args(shared_dir, cut, "--save_steps", "5")], capture_output=True, text=True)
    assert r.returncode != 0 and (cut / "checkpoint-10").is_dir()
    state = load_file(str(cut / "checkpoint-10" / "state.safetensors"))
    assert not any(k.startswith("rank_ema") for k in state)
    assert sum(v.shape[0] for k, v in state.items() if k.startswith("adam_m.") and ".lora_A." in k) == 3 * 35
    r = subprocess.run([leantune_bin, "train", *aesop_args(shared_dir, cut, "--save_steps", "5", "--resume", "auto")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert losses(cut) == losses(full)
    c = load_file(str(cut / "adapter" / "adapter_model.safetensors"))
    assert a.keys() == c.keys() and all(np.array_equal(a[k], c[k]) for k in a)


def test_plan_shows_memory_at_both_ranks(leantune_bin, shared_dir, tmp_path):
    base = aesop_args(shared_dir, tmp_path / "p")
    r = subprocess.run([leantune_bin, "plan", *base], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "adaptive rank: r 8 -> average 3" in r.stdout and "optimizer state" in r.stdout, r.stdout
    r = subprocess.run([leantune_bin, "plan", *base, "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    a = json.loads(r.stdout)["adaptive_rank"]
    assert a["init_r"] == 8 and a["target_r"] == 3
    ratio = a["trainable_params_final"] / a["trainable_params_init"]  # LoRA only: linear in r (64-byte rounding)
    assert abs(ratio - 3 / 8) < 0.01, ratio
    assert a["optimizer_bytes_final"] < a["optimizer_bytes_init"] and a["importance_bytes"] > 0
    # the importance state is rows of the one plan: two EMAs of r·(in + out) and a mask of r per module
    r = subprocess.run([leantune_bin, "plan", *base, "--json", "--buffers"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rows = {b["name"]: b for b in json.loads(r.stdout)["buffers"]}
    state = {n: b for n, b in rows.items() if n.startswith("rank_")}
    modules = [n[:-len(".lora_A.weight")] for n in rows if n.endswith(".lora_A.weight") and "adam" not in n
               and rows[n]["category"] == "trainable_params"]
    assert len(modules) == 5 * 7 and len(state) == 3 * len(modules)
    for m in modules:
        entries = (rows[m + ".lora_A.weight"]["bytes"] + rows[m + ".lora_B.weight"]["bytes"]) // 4
        for name, n in (("rank_ema1.", entries), ("rank_ema2.", entries), ("rank_mask.", 8)):
            assert rows[name + m]["bytes"] == 4 * n and rows[name + m]["lifetime"] == "persistent"
            assert rows[name + m]["category"] == "optimizer_state"
    assert sum(b["bytes"] for b in state.values()) == a["importance_bytes"]
    r = subprocess.run([leantune_bin, "plan", *base, "--buffers"], capture_output=True, text=True)
    assert r.returncode == 0 and "rank_mask." + modules[0] in r.stdout, r.stdout


def test_adaptive_refusals(leantune_bin, shared_dir, tmp_path):
    r = subprocess.run([leantune_bin, "train", *aesop_args(shared_dir, tmp_path / "a", "--lora_target_r", "8")],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "lora_target_r: 8 is out of range" in r.stderr, r.stderr
    r = subprocess.run([leantune_bin, "train", *aesop_args(shared_dir, tmp_path / "b", "--lora_rank_tinit", "9")],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "pruning needs a window" in r.stderr, r.stderr

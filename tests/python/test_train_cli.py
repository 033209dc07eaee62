# `leantune train` end to end on a random-weight HF Llama with a byte-level BPE tokenizer trained
# here: PEFT loads the adapter we save and its logits equal ours; we load an adapter PEFT saved
# and our logits equal PEFT's; a run killed with SIGKILL resumes to the same losses, bit for bit,
# as an uninterrupted run; a crash in the middle of a checkpoint write leaves the previous one.
import json
import os
import signal
import subprocess
import time

import numpy as np
import pytest
import torch

from test_model_parity import build

WORDS = "the fox crow wolf lamb said once upon a time there was grapes sour cheese tree river".split()


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
    d = tmp_path_factory.mktemp("train")
    rng = np.random.default_rng(0)
    docs = [" ".join(rng.choice(WORDS, size=rng.integers(8, 40))) + "." for _ in range(120)]
    (d / "data.txt").write_text("\n\n".join(docs) + "\n")
    model = build("llama3")  # vocab 300
    base = d / "base"
    model.save_pretrained(base, safe_serialization=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(docs, trainers.BpeTrainer(vocab_size=290, special_tokens=["<|eos|>"],
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(str(base / "tokenizer.json"))
    return d, base, model


def train(leantune_bin, d, base, out, *extra, env=None, wait=True, fault=None):
    # fault: arguments for leantune_fault_train (the same run, with --fault-* hooks) instead of leantune
    prog = [fault[0], *fault[1:]] if fault else [leantune_bin, "train"]
    cmd = [*prog, "--base-model", str(base), "--datasets", str(d / "data.txt"), "--max-steps", "8",
           "--learning-rate", "1e-2", "--lora-target-modules", "all-linear", "--lora-r", "4", "--lora-alpha", "8",
           "--micro-batch-size", "2", "--sequence-len", "32", "--threads", "1", "--output-dir", str(out),
           "--lora-dropout", "0.1", *extra]
    if not wait:
        return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    return r


def our_logits(leantune_bin, base, adapter, ids, tmp):
    out = tmp / "logits.f32"
    extra = ["--adapter", str(adapter)] if adapter else []
    r = subprocess.run([leantune_bin, "logits", "--model", str(base), *extra, "--ids",
                        ",".join(map(str, ids)), "--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return np.fromfile(out, dtype=np.float32)


def peft_logits(model, adapter, ids):
    from peft import PeftModel
    pm = PeftModel.from_pretrained(model, str(adapter)).eval()
    with torch.no_grad():
        return pm(torch.tensor([ids])).logits[0, -1].numpy()


def test_peft_loads_our_adapter(leantune_bin, setup, tmp_path):
    d, base, model = setup
    r = train(leantune_bin, d, base, tmp_path / "out")
    assert r.returncode == 0, r.stderr
    adapter = tmp_path / "out" / "adapter"
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    assert cfg["peft_type"] == "LORA" and cfg["r"] == 4
    ids = list(np.random.default_rng(1).integers(0, 290, size=20))
    ref = peft_logits(build("llama3"), adapter, ids)
    ours = our_logits(leantune_bin, base, adapter, ids, tmp_path)
    base_only = our_logits(leantune_bin, base, None, ids, tmp_path)
    assert np.abs(base_only - ref).max() > 1e-2, "the adapter changed nothing: the test would prove nothing"
    assert np.abs(ours - ref).max() <= 1e-4


def test_merge_writes_a_folder_transformers_loads(leantune_bin, setup, tmp_path):
    from peft import PeftModel
    from transformers import LlamaForCausalLM
    d, base, _ = setup
    r = train(leantune_bin, d, base, tmp_path / "out")
    assert r.returncode == 0, r.stderr
    r = subprocess.run([leantune_bin, "merge", "--model", str(base), "--adapter", str(tmp_path / "out" / "adapter"),
                        "--out", str(tmp_path / "merged")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    ids = list(np.random.default_rng(4).integers(0, 290, size=20))
    merged = LlamaForCausalLM.from_pretrained(tmp_path / "merged", dtype=torch.float32).eval()
    with torch.no_grad():
        got = merged(torch.tensor([ids])).logits[0, -1].numpy()
    ref = peft_logits(build("llama3"), tmp_path / "out" / "adapter", ids)
    assert np.abs(got - ref).max() <= 1e-4
    assert (tmp_path / "merged" / "tokenizer.json").exists()


def test_we_load_a_peft_adapter(leantune_bin, setup, tmp_path):
    from peft import LoraConfig, get_peft_model
    d, base, _ = setup
    torch.manual_seed(2)
    pm = get_peft_model(build("llama3"), LoraConfig(r=8, lora_alpha=16, init_lora_weights=False, task_type="CAUSAL_LM",
                                                    target_modules=["q_proj", "v_proj", "down_proj"], use_rslora=True))
    pm.save_pretrained(tmp_path / "peft")
    ids = list(np.random.default_rng(3).integers(0, 290, size=20))
    with torch.no_grad():
        ref = pm(torch.tensor([ids])).logits[0, -1].numpy()
    ours = our_logits(leantune_bin, base, tmp_path / "peft", ids, tmp_path)
    assert np.abs(ours - ref).max() <= 1e-4


def final_losses(out):
    latest = (out / "LATEST").read_text()
    return json.loads((out / latest / "trainer_state.json").read_text())["losses"]


def metrics_records(out):
    """metrics.jsonl without its wall-clock fields (throughput, memory), which differ between runs."""
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in ("tokens_per_s", "rss_bytes")} for r in recs]


def test_sigkill_then_resume_repeats_the_uninterrupted_losses(leantune_bin, fault_bin, setup, tmp_path):
    d, base, _ = setup
    r = train(leantune_bin, d, base, tmp_path / "full", "--save-steps", "2", "--max-steps", "12")
    assert r.returncode == 0, r.stderr
    expected = final_losses(tmp_path / "full")
    assert len(expected) == 12
    out = tmp_path / "killed"
    p = train(leantune_bin, d, base, out, "--save-steps", "2", "--max-steps", "12", wait=False,
              fault=[fault_bin, "--fault-sleep-ms", "150"])
    deadline = time.time() + 120
    while time.time() < deadline:  # kill once a middle checkpoint is published
        latest = out / "LATEST"
        if latest.exists() and latest.read_text() in ("checkpoint-4", "checkpoint-6", "checkpoint-8"):
            break
        if p.poll() is not None:
            break
        time.sleep(0.01)
    p.send_signal(signal.SIGKILL)
    p.wait()
    killed_at = (out / "LATEST").read_text()
    assert killed_at != "checkpoint-12", "the run finished before it could be killed"
    r = train(leantune_bin, d, base, out, "--save-steps", "2", "--max-steps", "12", "--resume", "auto")
    assert r.returncode == 0, r.stderr
    assert final_losses(out) == expected, f"killed at {killed_at}"
    # the steps between the checkpoint and the kill ran twice, but metrics.jsonl holds each once
    assert metrics_records(out) == metrics_records(tmp_path / "full"), f"killed at {killed_at}"


def test_crash_during_checkpoint_write_keeps_the_previous_one(leantune_bin, fault_bin, setup, tmp_path):
    d, base, _ = setup
    out = tmp_path / "crash"
    r = train(leantune_bin, d, base, out, "--save-steps", "2", "--max-steps", "8",
              fault=[fault_bin, "--fault-abort-at-checkpoint", "6"])
    assert r.returncode != 0
    assert (out / "LATEST").read_text() == "checkpoint-4"
    r = train(leantune_bin, d, base, out, "--save-steps", "2", "--max-steps", "8", "--resume", "auto")
    assert r.returncode == 0, r.stderr
    r2 = train(leantune_bin, d, base, tmp_path / "clean", "--save-steps", "2", "--max-steps", "8")
    assert r2.returncode == 0, r2.stderr
    assert final_losses(out) == final_losses(tmp_path / "clean")
    assert metrics_records(out) == metrics_records(tmp_path / "clean")


def test_diverging_run_stops_with_a_diagnostic_and_keeps_the_last_checkpoint(leantune_bin, setup, tmp_path):
    d, base, _ = setup
    out = tmp_path / "nan"
    r = train(leantune_bin, d, base, out, "--save-steps", "1", "--max-steps", "40", "--learning-rate", "1e30",
              "--max-grad-norm", "0", "--lora-alpha", "4096")
    assert r.returncode != 0
    assert "loss is" in r.stderr or "non-finite gradient" in r.stderr, r.stderr
    assert "checkpoint" in r.stderr
    latest = (out / "LATEST").read_text()
    state = json.loads((out / latest / "trainer_state.json").read_text())
    assert all(np.isfinite(state["losses"]))


def test_staged_unfreezing_trains_only_the_unfrozen_layers(leantune_bin, setup, tmp_path):
    from safetensors.numpy import load_file
    d, base, _ = setup
    out = tmp_path / "unfreeze"
    # layers >= 2 train from step 0, layers >= 1 from step 3, layer 0 never
    r = train(leantune_bin, d, base, out, "--method", "full", "--unfreeze-schedule", "0:2:1.0,3:1:0.5",
              "--max-steps", "5", "--learning-rate", "1e-3")
    assert r.returncode == 0, r.stderr
    before = load_file(str(base / "model.safetensors"))
    after = load_file(str(out / "model" / "model.safetensors"))
    changed = lambda name: not np.array_equal(before[name], after[name])
    assert not changed("model.layers.0.self_attn.q_proj.weight")
    assert changed("model.layers.1.self_attn.q_proj.weight")
    assert changed("model.layers.2.mlp.down_proj.weight")

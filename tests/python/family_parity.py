"""Checks shared by the per-family parity tests (Gemma, Phi-3, Qwen3, ...): a short `leantune train`
on byte-level documents, an adapter it saves loaded by PEFT, a full fine-tune loaded by
transformers, and a training mode (QLoRA, bf16, checkpointing) starting where fp32 LoRA does.
Each family test supplies only what differs: how to build its model, its words, its module names
and the tensor that a full fine-tune must change.
"""
import json
import subprocess

import numpy as np
import torch
from safetensors.numpy import load_file

from test_model_parity import DECODE_STEPS, PROMPT_LEN, hf_logits, our_logits, write_byte_tokenizer

BASE_WORDS = ["alpha", "beta", "gamma", "delta"]


def train_tiny(leantune_bin, folder, tmp_path, out, words, *extra):
    """Eight steps of `leantune train` on 60 documents of the given words, byte-level tokens."""
    write_byte_tokenizer(folder)
    rng = np.random.default_rng(0)
    vocab = BASE_WORDS + list(words)
    docs = [" ".join(rng.choice(vocab, size=rng.integers(8, 30))) + "." for _ in range(60)]
    (tmp_path / "data.txt").write_text("\n\n".join(docs) + "\n")
    r = subprocess.run([leantune_bin, "train", "--base-model", str(folder), "--datasets", str(tmp_path / "data.txt"),
                        "--max-steps", "8", "--learning-rate", "1e-2", "--micro-batch-size", "2", "--sequence-len",
                        "32", "--threads", "1", "--output-dir", str(out), *extra], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r


def check_peft_loads_our_adapter(leantune_bin, tmp_path, folder, make_base, words, *extra):
    """A LoRA adapter trained by `leantune train` loads in PEFT on `make_base()`; the logits over a
    prompt and decode steps equal ours with the adapter (1e-4, fp32 sums in a different order), and
    differ from the base's (so the check is not vacuous). Returns the output folder."""
    from peft import PeftModel
    out = tmp_path / "out"
    train_tiny(leantune_bin, folder, tmp_path, out, words, "--lora-target-modules", "all-linear", "--lora-r", "4",
               "--lora-alpha", "8", *extra)
    ids = np.random.default_rng(6).integers(0, 256, size=PROMPT_LEN + DECODE_STEPS).tolist()
    pm = PeftModel.from_pretrained(make_base(), str(out / "adapter")).eval()
    ref = hf_logits(pm, ids)[:DECODE_STEPS]
    assert np.abs(hf_logits(make_base(), ids)[:DECODE_STEPS] - ref).max() > 1e-2, "training changed nothing"
    ours = our_logits(leantune_bin, folder, ids, tmp_path, ("--adapter", str(out / "adapter")))
    assert np.abs(ours.reshape(DECODE_STEPS, -1) - ref).max() <= 1e-4
    return out


def check_full_fine_tune_loads(leantune_bin, tmp_path, folder, model_cls, words, key, **load_kwargs):
    """`--method full` saves a folder with exactly the base's tensors, `key` among those trained,
    that `model_cls.from_pretrained` loads with nothing missing or unexpected and whose logits equal
    ours from the same folder (1e-4)."""
    out = tmp_path / "out"
    train_tiny(leantune_bin, folder, tmp_path, out, words, "--method", "full")
    before, after = load_file(str(folder / "model.safetensors")), load_file(str(out / "model" / "model.safetensors"))
    assert set(after) == set(before)
    assert after[key].shape == before[key].shape and not np.array_equal(before[key], after[key]), f"{key} not trained"
    tuned, info = model_cls.from_pretrained(out / "model", dtype=torch.float32, output_loading_info=True,
                                            **load_kwargs)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    ids = np.random.default_rng(5).integers(0, 256, size=PROMPT_LEN + DECODE_STEPS).tolist()
    ours = our_logits(leantune_bin, out / "model", ids, tmp_path).reshape(DECODE_STEPS, -1)
    assert np.abs(ours - hf_logits(tuned.eval(), ids)[:DECODE_STEPS]).max() <= 1e-4


def check_mode_starts_where_fp32_does(leantune_bin, tmp_path, folder, words, mode, extra=()):
    """A QLoRA, 16-bit or checkpointed run's first loss is the fp32 LoRA run's up to the rounding of
    the mode (5%: NF4 weights carry ~1e-1 relative error per weight, bf16 ~4e-3, and the loss of
    random weights is a mean over many such products), and its loss goes down over eight steps."""
    def losses(out, *more):
        train_tiny(leantune_bin, folder, tmp_path, out, words, *extra, *more)
        return [json.loads(r)["loss"] for r in (out / "metrics.jsonl").read_text().splitlines() if '"loss"' in r]

    ref = losses(tmp_path / "fp32")
    got = losses(tmp_path / "mode", *mode)
    assert abs(got[0] - ref[0]) <= 0.05 * ref[0], (got[0], ref[0])
    assert got[-1] < got[0]

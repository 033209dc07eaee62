# A ZeRO run (`leantune train --zero-stage S`, on one process and, when mpirun is installed, on two
# ranks) leaves the outputs of a single-process run of the same global batch: report.html,
# ledger.json, metrics.jsonl and, for a full fine-tune of a random-weight HF Llama, a model folder
# with the base's config.json and tokenizer.json that transformers loads, whose logits equal
# `leantune logits` on the same folder.
import json
import os
import shutil
import subprocess

import numpy as np
import pytest
import torch

from test_train_cli import setup, train  # noqa: F401 (setup: the module fixture, base model + data)


def output_files(out):
    """The files of an output folder, without checkpoints (sharded under ZeRO) and ZeRO's per-rank ledgers."""
    return {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()
            and not p.relative_to(out).parts[0].startswith("checkpoint-") and p.name != "LATEST"
            and not p.name.startswith("ledger-rank")}


def zero_train(leantune_bin, d, base, out, stage, ranks):
    args = ("--method", "full", "--learning-rate", "1e-3", "--zero-stage", str(stage),
            "--gradient-accumulation-steps", str(2 // ranks))
    if ranks == 1:
        return train(leantune_bin, d, base, out, *args)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    # train()'s `fault` replaces the program before the flags: here `mpirun ... leantune train`
    launcher = [shutil.which("mpirun"), "-np", str(ranks), "--oversubscribe", leantune_bin, "train"]
    return train(leantune_bin, d, base, out, *args, env=env, fault=launcher)


PROMPT, DECODE = 16, 8


def logits_of_folder(leantune_bin, folder, ids, tmp):
    """Our next-token logits after the prompt and after each of DECODE - 1 decode steps (DECODE rows)."""
    out = tmp / "logits.f32"
    r = subprocess.run([leantune_bin, "logits", "--model", str(folder), "--ids", ",".join(map(str, ids[:PROMPT])),
                        "--decode", ",".join(map(str, ids[PROMPT:PROMPT + DECODE - 1])), "--out", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return np.fromfile(out, dtype=np.float32).reshape(DECODE, -1)


@pytest.mark.parametrize("stage,ranks", [(0, 1), (3, 1), (3, 2)])
def test_zero_full_fine_tune_writes_a_folder_transformers_loads(leantune_bin, setup, tmp_path, stage, ranks):
    from transformers import LlamaForCausalLM
    if ranks > 1 and not shutil.which("mpirun"):
        pytest.skip("mpirun is not installed")
    d, base, _ = setup
    r = train(leantune_bin, d, base, tmp_path / "single", "--method", "full", "--learning-rate", "1e-3",
              "--gradient-accumulation-steps", "2")
    assert r.returncode == 0, r.stderr
    out = tmp_path / "zero"
    r = zero_train(leantune_bin, d, base, out, stage, ranks)
    assert r.returncode == 0, r.stderr

    files = output_files(out)
    assert files == output_files(tmp_path / "single")
    assert {"report.html", "ledger.json", "metrics.jsonl", "model/model.safetensors", "model/config.json",
            "model/tokenizer.json"} <= files
    for f in ("config.json", "tokenizer.json"):
        assert (out / "model" / f).read_bytes() == (base / f).read_bytes(), f
    ledger = json.loads((out / "ledger.json").read_text())
    assert ledger["planned"]["optimizer_state"] > 0 and ledger["samples"], "ledger.json lacks the plan or the timeline"

    # transformers loads the folder; its logits are ours on the same folder (fp32 parity, as in
    # test_model_parity.py: the two differ only in summation order, far below 1e-4)
    ids = list(np.random.default_rng(5).integers(0, 290, size=PROMPT + DECODE))
    model = LlamaForCausalLM.from_pretrained(out / "model", dtype=torch.float32).eval()
    with torch.no_grad():
        ref = model(torch.tensor([ids])).logits[0, PROMPT - 1:PROMPT - 1 + DECODE].numpy()
    ours = logits_of_folder(leantune_bin, out / "model", ids, tmp_path)
    assert np.abs(ref).max() > 0.5, "logits too small to be a meaningful test"
    assert np.abs(ours - ref).max() <= 1e-4
    # and the folder holds the fine-tuned model, not the base
    base_logits = logits_of_folder(leantune_bin, base, ids, tmp_path)
    assert np.abs(base_logits - ref).max() > 1e-2, "the fine-tune changed nothing: the test would prove nothing"

# `leantune sweep` end to end on stories260K / Aesop: a grid of two configurations (lora_alpha given
# as a multiple of r, target modules as "attn") trains each in turn and writes sweep.jsonl / .csv /
# .md / .html; each configuration's losses, held-out losses and trainable parameters equal a separate
# `leantune train` of the same flags bit for bit, though the base is loaded and converted once (the
# second run borrows it); the HTML report renders in headless Chromium with
# its four charts; a bad grid is refused before anything trains.
import csv
import json
import subprocess

import pytest

from test_plan_cli import render


def base_args(shared_dir):
    return ["--base_model", str(shared_dir / "models/stories260K/stories260K.bin"),
            "--tokenizer", str(shared_dir / "models/stories260K/tok512.bin"),
            "--datasets", str(shared_dir / "data/aesop_fables/aesop_fables.txt"),
            "--method", "lora", "--micro_batch_size", "8", "--sequence_len", "128", "--max_steps", "4",
            "--learning_rate", "3e-3", "--eval_batches", "2", "--threads", "1", "--seed", "3"]


def run(cmd, ok=True):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if ok:
        assert p.returncode == 0, p.stderr + p.stdout[-3000:]
    return p


def metrics(out):
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in recs if "loss" in r and "eval_loss" not in r], [r["eval_loss"] for r in recs if "eval_loss" in r]


@pytest.fixture(scope="module")
def sweep(leantune_bin, shared_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    p = run([leantune_bin, "sweep", *base_args(shared_dir), "--grid", "lora_r=2,4;lora_target_modules=attn;lora_alpha=2r",
             "--out", str(out), "--price-per-hour", "0.5"])
    return dict(out=out, stdout=p.stdout, rows=[json.loads(l) for l in (out / "sweep.jsonl").read_text().splitlines()])


def test_sweep_rows_equal_single_runs(leantune_bin, shared_dir, sweep, tmp_path):
    rows = sweep["rows"]
    assert [r["label"] for r in rows] == ["lora_r=2 lora_target_modules=attn lora_alpha=2r",
                                          "lora_r=4 lora_target_modules=attn lora_alpha=2r"]
    assert [r["lora_alpha"] for r in rows] == [4, 8] and rows[1]["target_modules"] == "q_proj,k_proj,v_proj,o_proj"
    # the same configuration as a plain `leantune train`
    single = tmp_path / "single"
    run([leantune_bin, "train", *base_args(shared_dir), "--lora_r", "4", "--lora_alpha", "8",
         "--lora_target_modules", "q_proj,k_proj,v_proj,o_proj", "--output_dir", str(single)])
    losses, evals = metrics(single)
    sw_losses, sw_evals = metrics(sweep["out"] / "run-02")
    assert sw_losses == losses and sw_evals == evals
    assert rows[1]["eval_loss"] == pytest.approx(evals[-1], rel=1e-7) and rows[1]["first_eval_loss"] == pytest.approx(evals[0], rel=1e-7)
    assert rows[1]["train_loss"] == pytest.approx(losses[-1], rel=1e-7)
    # trainable parameters: 4 attention projections per layer, r·(in + out) each (stories260K: dim 64, 5 layers, 4 kv heads of 8)
    assert rows[1]["trainable_params"] == 2 * rows[0]["trainable_params"] == 5 * 4 * (64 + 64 + 64 + 32 + 64 + 32 + 64 + 64)
    assert (single / "adapter" / "adapter_config.json").exists() and (sweep["out"] / "run-02" / "adapter").exists()
    for r in rows:
        assert r["steps"] == 4 and r["tokens"] == 4 * 8 * 128 and r["tokens_per_s"] > 0
        assert r["peak_rss_bytes"] > 0 and r["predicted_peak_bytes"] > 0 and r["seconds"] > 0
        assert r["usd"] == pytest.approx(r["seconds"] / 3600 * 0.5)
        assert r["loss_reduction"] == pytest.approx(r["first_eval_loss"] - r["eval_loss"])
    assert sum(r["recommended"] for r in rows) == 1 and any(r["pareto"] for r in rows)
    # one process, the base loaded and its frozen weights converted by the first run only; the second
    # borrowed them (and still equals its own `leantune train` above, bit for bit)
    assert [r["base_loaded"] for r in rows] == [True, False]
    assert [r["frozen_converted"] for r in rows] == [True, False]
    assert "base model: loaded once, for 2 runs; frozen weights converted once" in (sweep["out"] / "sweep.md").read_text()


def test_sweep_tables(sweep):
    out = sweep["out"]
    with open(out / "sweep.csv") as f:
        table = list(csv.DictReader(f))
    assert [int(r["trainable_params"]) for r in table] == [r["trainable_params"] for r in sweep["rows"]]
    md = (out / "sweep.md").read_text()
    for section in ("## α/r mismatch", "## Target selection", "## Rank against cost", "## Recommendation"):
        assert section in md, section
    assert md in sweep["stdout"]


def test_sweep_report_renders_in_chromium(sweep, tmp_path):
    r = render(sweep["out"] / "sweep.html", tmp_path)
    assert r["errors"] == [], r
    assert r["svgs"] == 4 and r["drawn"] == 4, r


def test_bad_grid_is_refused_before_training(leantune_bin, shared_dir, tmp_path):
    p = run([leantune_bin, "sweep", *base_args(shared_dir), "--grid", "lora_r=4;lora_alpha=xr", "--out", str(tmp_path)], ok=False)
    assert p.returncode != 0 and "lora_alpha=xr" in p.stderr, p.stderr
    p = run([leantune_bin, "sweep", *base_args(shared_dir), "--grid", "lora_r=4,8;lora_dropuot=0.1", "--out", str(tmp_path)], ok=False)
    assert p.returncode != 0 and "configuration 1" in p.stderr and "lora_dropuot" in p.stderr, p.stderr
    assert not (tmp_path / "run-01").exists()

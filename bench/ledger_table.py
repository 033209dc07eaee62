#!/usr/bin/env python3
"""Predicted vs measured memory: runs `leantune train` for a grid of configurations on a
random-weight SmolLM2-135M-shaped model (Aesop's fables tokenized with the stories260K tokenizer,
whose ids fit the larger vocabulary) and tabulates, per run, the predicted peak (process baseline +
arenas + data) against the measured peak RSS (VmHWM), with the arena bytes checked against the
resident bytes the ledger measured. Memory only: timings are not compared.

Usage: .venv/bin/python bench/ledger_table.py [--steps 2] [--quick]
"""
import argparse
import itertools
import json
import pathlib
import subprocess
import tempfile

from bench_inference import ROOT, make_smollm2

SHARED = ROOT.parent / "shared"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "build" / "bin" / "leantune"))
    ap.add_argument("--cache", default=str(ROOT / "build" / "bench-models"))
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="four configurations instead of the grid")
    ap.add_argument("--out", default=str(ROOT / "build" / "ledger-table.json"))
    a = ap.parse_args()
    model = pathlib.Path(a.cache) / "smollm2-135m-random"
    make_smollm2(model)
    grid = list(itertools.product(["lora", "full"], ["none", "every", "mlp"], [1, 4], [128, 256]))
    if a.quick:
        grid = [("lora", "none", 4, 256), ("lora", "every", 4, 256), ("full", "none", 1, 256), ("full", "mlp", 1, 128)]
    rows = []
    for method, ckpt, mb, seq in grid:
        with tempfile.TemporaryDirectory() as out:
            cmd = [a.bin, "train", "--base_model", str(model), "--tokenizer", str(SHARED / "models/stories260K/tok512.bin"),
                   "--datasets", str(SHARED / "data/aesop_fables/aesop_fables.txt"), "--method", method,
                   "--lora_target_modules", "all-linear", "--gradient_checkpointing", ckpt, "--micro_batch_size",
                   str(mb), "--sequence_len", str(seq), "--max_steps", str(a.steps), "--eval_batches", "1",
                   "--val_set_size", "0.05", "--threads", str(a.threads), "--output_dir", out, "--save_steps", "0"]
            subprocess.run(cmd, check=True, capture_output=True, text=True)
            j = json.loads((pathlib.Path(out) / "ledger.json").read_text())
        arenas = sum(v for k, v in j["planned"].items() if k != "data")
        resident = sum(j["max_resident"].values())
        pred, peak = j["predicted_peak_bytes"], j["peak_rss_bytes"]
        rows.append(dict(method=method, checkpointing=ckpt, micro_batch=mb, seq=seq, arena_bytes=arenas,
                         resident_bytes=resident, predicted_peak=pred, measured_peak=peak,
                         error_pct=100.0 * (peak - pred) / pred, peak_phase=j.get("peak_phase")))
        r = rows[-1]
        print(f"| {method} | {ckpt} | {mb} | {seq} | {arenas / 2**20:.1f} | {resident / 2**20:.1f} | "
              f"{pred / 2**20:.1f} | {peak / 2**20:.1f} | {r['error_pct']:+.2f}% |", flush=True)
    pathlib.Path(a.out).write_text(json.dumps(rows, indent=1))
    worst = max(abs(r["error_pct"]) for r in rows)
    print(f"\n{len(rows)} runs; largest |measured - predicted| / predicted = {worst:.2f}%; arenas fully resident in "
          f"{sum(r['arena_bytes'] == r['resident_bytes'] for r in rows)} of {len(rows)}")


if __name__ == "__main__":
    main()

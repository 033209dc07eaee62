#!/usr/bin/env python3
# Top-k gradient sparsification on stories260K / Aesop (not a timed test): held-out loss after the
# same steps, dense against grad_topk 0.15 with error feedback and with compensation scaling, and
# on 2 ranks (mpirun, ZeRO stage 0) the bytes each rank sends per step, dense against top-k.
# Usage: bench/bench_grad_topk.py [--bin build/bin/leantune] [--shared ../shared] [--steps 30 60 80]
import argparse
import json
import os
import pathlib
import shutil
import subprocess
import tempfile


def run(bin_, shared, out, steps, extra, ranks=1):
    cmd = [bin_, "train", "--base_model", f"{shared}/models/stories260K/stories260K.bin",
           "--tokenizer", f"{shared}/models/stories260K/tok512.bin",
           "--datasets", f"{shared}/data/aesop_fables/aesop_fables.txt", "--method", "lora", "--lora_r", "8",
           "--lora_alpha", "16", "--lora_target_modules", "all-linear", "--micro_batch_size", "8",
           "--sequence_len", "128", "--max_steps", str(steps), "--learning_rate", "3e-3", "--warmup_steps", "3",
           "--eval_batches", "4", "--threads", "1", "--seed", "5", "--output_dir", str(out), *extra]
    env = None
    if ranks > 1:
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        cmd = [shutil.which("mpirun"), "-np", str(ranks), "--oversubscribe"] + cmd
    subprocess.run(cmd, check=True, capture_output=True, env=env)
    recs = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
    steps_ = [r for r in recs if "eval_loss" not in r and "loss" in r]
    return [r["eval_loss"] for r in recs if "eval_loss" in r][-1], steps_[-1]["comm_bytes_per_step"]


def main():
    root = pathlib.Path(__file__).resolve().parents[1]
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(root / "build/bin/leantune"))
    ap.add_argument("--shared", default=str(root.parent / "shared"))
    ap.add_argument("--steps", type=int, nargs="+", default=[30, 60, 80])
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t = pathlib.Path(tmp)
        print("steps  dense    top15%+feedback     top15%+scaling")
        for s in a.steps:
            d, _ = run(a.bin, a.shared, t / f"d{s}", s, [])
            k, _ = run(a.bin, a.shared, t / f"k{s}", s, ["--grad_topk", "0.15"])
            c, _ = run(a.bin, a.shared, t / f"c{s}", s, ["--grad_topk", "0.15", "--grad_topk_feedback", "scale"])
            print(f"{s:5d}  {d:.4f}  {k:.4f} ({100 * (k - d) / d:+.2f}%)  {c:.4f} ({100 * (c - d) / d:+.2f}%)")
        if shutil.which("mpirun"):
            _, dense = run(a.bin, a.shared, t / "d2", 8, ["--zero_stage", "0"], ranks=2)
            _, sparse = run(a.bin, a.shared, t / "k2", 8, ["--zero_stage", "0", "--grad_topk", "0.15"], ranks=2)
            print(f"2 ranks, ZeRO 0: bytes per step and rank: dense {dense:.0f}, top-15% {sparse:.0f} ({sparse / dense:.3f}x)")


if __name__ == "__main__":
    main()

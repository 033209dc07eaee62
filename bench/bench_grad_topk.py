#!/usr/bin/env python3
# Top-k gradient sparsification on stories260K / Aesop (not a timed test): held-out loss after the
# same steps, dense against grad_topk 0.15 with error feedback (AdamW's variance correction on, the
# default, and off) and with compensation scaling, and on 2 ranks (mpirun, ZeRO stages 0 and 1) the
# bytes each rank sends per step, dense against top-k: in all, and without stage 1's parameter
# all-gather (ledger-rank0.json's param_gather_bytes_per_step, the same dense or sparse).
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
    comm = steps_[-1]["comm_bytes_per_step"]
    if ranks > 1:  # the gradient exchange: all but the parameter all-gather
        return comm, comm - json.loads((out / "ledger-rank0.json").read_text())["param_gather_bytes_per_step"]
    return [r["eval_loss"] for r in recs if "eval_loss" in r][-1], comm


def main():
    root = pathlib.Path(__file__).resolve().parents[1]
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(root / "build/bin/leantune"))
    ap.add_argument("--shared", default=str(root.parent / "shared"))
    ap.add_argument("--steps", type=int, nargs="+", default=[30, 60, 80])
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t = pathlib.Path(tmp)
        print("held-out loss after the same steps (relative to dense)")
        print("steps  dense    top15%+feedback     ..without var. corr.  top15%+scaling")
        rel = lambda x, d: f"{x:.4f} ({100 * (x - d) / d:+.2f}%)"
        for s in a.steps:
            d, _ = run(a.bin, a.shared, t / f"d{s}", s, [])
            k, _ = run(a.bin, a.shared, t / f"k{s}", s, ["--grad_topk", "0.15"])
            p, _ = run(a.bin, a.shared, t / f"p{s}", s, ["--grad_topk", "0.15", "--grad_topk_variance_correction", "false"])
            c, _ = run(a.bin, a.shared, t / f"c{s}", s, ["--grad_topk", "0.15", "--grad_topk_feedback", "scale"])
            print(f"{s:5d}  {d:.4f}  {rel(k, d)}  {rel(p, d)}    {rel(c, d)}")
        if shutil.which("mpirun"):
            print("2 ranks: bytes sent per step and rank, top-15% against dense of the same stage")
            for stage in (0, 1):
                dense, dg = run(a.bin, a.shared, t / f"d2{stage}", 8, ["--zero_stage", str(stage)], ranks=2)
                sparse, sg = run(a.bin, a.shared, t / f"k2{stage}", 8, ["--zero_stage", str(stage), "--grad_topk", "0.15"], ranks=2)
                print(f"ZeRO {stage}: all: dense {dense:.0f}, top-15% {sparse:.0f} ({sparse / dense:.3f}x); without the "
                      f"parameter all-gather: dense {dg:.0f}, top-15% {sg:.0f} ({sg / dg:.3f}x)")


if __name__ == "__main__":
    main()

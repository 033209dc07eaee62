#!/usr/bin/env python3
# Adaptive LoRA rank on stories260K / Aesop (not a timed test): held-out loss after the same steps of
#   (a) lora_rank_policy: adaptive from rank r0 down to an average rank r1 per module (both importances),
#   (b) fixed rank r1 from the start (about the same final trainable parameters as (a)),
#   (c) fixed rank r0 (the starting rank, r0/r1 times the parameters),
# with the LoRA parameters each saved adapter holds (the adaptive ones truncated to rank_pattern).
# Measured (80 steps, r0 16 -> r1 4, seed 5; seed 6 in brackets): (a) sensitivity 2.9789 [3.0446] with
# 23516 [23084] LoRA parameters, variance 3.0750 with 17828; (b) fixed r=4 3.0411 [3.1193] with 23120;
# (c) fixed r=16 2.8391 with 92480.
# Usage: bench/bench_adaptive_rank.py [--bin build/bin/leantune] [--shared ../shared] [--r0 16] [--r1 4]
#        [--steps 80] [--seeds 5 6 7] [--importance sensitivity variance]
import argparse
import json
import pathlib
import struct
import subprocess
import tempfile


def lora_params(adapter):
    """A and B elements of a saved adapter (the safetensors header only)."""
    raw = (adapter / "adapter_model.safetensors").read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    total = 0
    for k, v in header.items():
        if ".lora_A." in k or ".lora_B." in k:
            e = 1
            for d in v["shape"]:
                e *= d
            total += e
    return total


def run(a, out, r, seed, extra):
    cmd = [a.bin, "train", "--base_model", f"{a.shared}/models/stories260K/stories260K.bin",
           "--tokenizer", f"{a.shared}/models/stories260K/tok512.bin",
           "--datasets", f"{a.shared}/data/aesop_fables/aesop_fables.txt", "--method", "lora", "--lora_r", str(r),
           "--lora_alpha", str(2 * a.r1 if a.same_scale else 2 * r), "--lora_target_modules", "all-linear",
           "--micro_batch_size", "8", "--sequence_len", "128", "--max_steps", str(a.steps), "--learning_rate", "3e-3",
           "--warmup_steps", "3", "--eval_batches", "8", "--threads", "1", "--seed", str(seed),
           "--output_dir", str(out), *extra]
    subprocess.run(cmd, check=True, capture_output=True)
    recs = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
    return [r["eval_loss"] for r in recs if "eval_loss" in r][-1], lora_params(out / "adapter")


def main():
    root = pathlib.Path(__file__).resolve().parents[1]
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(root / "build/bin/leantune"))
    ap.add_argument("--shared", default=str(root.parent / "shared"))
    ap.add_argument("--r0", type=int, default=16)
    ap.add_argument("--r1", type=int, default=4)
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--seeds", type=int, nargs="+", default=[5, 6, 7])
    ap.add_argument("--importance", nargs="+", default=["sensitivity", "variance"])
    ap.add_argument("--same-scale", action="store_true",
                    help="lora_alpha = 2·r1 for every run (default: alpha = 2r, the usual habit)")
    a = ap.parse_args()
    tinit, tfinal = a.steps // 10, a.steps // 4
    adaptive = ["--lora_rank_policy", "adaptive", "--lora_target_r", str(a.r1), "--lora_rank_tinit", str(tinit),
                "--lora_rank_tfinal", str(tfinal), "--lora_rank_delta_t", "2"]
    runs = [(f"(a) adaptive {a.r0}->{a.r1} {imp}", a.r0, adaptive + ["--lora_rank_importance", imp])
            for imp in a.importance]
    runs += [(f"(b) fixed r={a.r1}", a.r1, []), (f"(c) fixed r={a.r0}", a.r0, [])]
    print(f"stories260K / Aesop, all-linear, {a.steps} steps, lr 3e-3, held-out loss (8 eval batches); "
          f"adaptive: tinit {tinit}, tfinal {tfinal}, delta_t 2; seeds {a.seeds}")
    print(f"{'run':<36} {'LoRA params':>12} " + " ".join(f"{'seed ' + str(s):>10}" for s in a.seeds) + f" {'mean':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        t = pathlib.Path(tmp)
        for i, (name, r, extra) in enumerate(runs):
            evals, params = [], 0
            for s in a.seeds:
                e, params = run(a, t / f"{i}_{s}", r, s, extra)
                evals.append(e)
            print(f"{name:<36} {params:>12} " + " ".join(f"{e:>10.4f}" for e in evals) +
                  f" {sum(evals) / len(evals):>10.4f}", flush=True)


if __name__ == "__main__":
    main()

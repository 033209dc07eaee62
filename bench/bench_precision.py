#!/usr/bin/env python3
"""LoRA training speed and memory by base format: fp32, bf16, fp16 (mixed precision) and NF4 +
double quant, FP4, int8 (QLoRA) bases, on the random-weight SmolLM2-135M-shaped folder, LoRA r=16
on all linear modules. One `leantune bench --train` per row: median step after a warm-up,
tokens/s, model FLOPs utilization (against the fastest measured unit of the precision: bf16 on AMX where present),
frozen-weight bytes as planned and peak RSS. leantune only: the PyTorch peer is in
bench/peers/peers.py.

Usage: .venv/bin/python bench/bench_precision.py [--threads 2 --batch 4 --seq 256 --steps 2]
"""
import argparse
import json
import pathlib
import subprocess

from bench_inference import ROOT, make_smollm2

ROWS = [("fp32", []), ("bf16", ["--precision", "bf16"]), ("fp16", ["--precision", "fp16"]),
        ("nf4 + double quant", ["--quantize", "nf4", "--double-quant"]), ("fp4", ["--quantize", "fp4"]),
        ("int8 (LLM.int8)", ["--quantize", "int8"])]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "build" / "bin" / "leantune"))
    ap.add_argument("--cache", default=str(ROOT / "build" / "bench-models"))
    ap.add_argument("--threads", default="2")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "build" / "bench-precision.json"))
    a = ap.parse_args()
    model = pathlib.Path(a.cache) / "smollm2-135m-random"
    make_smollm2(model)
    print(f"SmolLM2-135M shape, LoRA r=16 all-linear, micro-batch {a.batch} x {a.seq}, {a.threads} threads\n")
    print("| base | tokens/s | MFU | planned arenas | peak RSS |\n|---|---|---|---|---|")
    rows = []
    for name, extra in ROWS:
        out = subprocess.run([a.bin, "bench", "--train", "--model", str(model), "--threads", a.threads, "--micro-batch",
                              str(a.batch), "--seq", str(a.seq), "--steps", str(a.steps), *extra],
                             capture_output=True, text=True, check=True)
        j = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(dict(base=name, **j))
        print(f"| {name} | {j['tokens_per_s']:.0f} | {100 * j['mfu']:.1f}% | {j['planned_bytes'] / 2**20:.0f} MiB | "
              f"{j['peak_rss_bytes'] / 2**20:.0f} MiB |", flush=True)
    pathlib.Path(a.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

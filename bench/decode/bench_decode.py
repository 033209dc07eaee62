#!/usr/bin/env python3
"""Decode speed per weight format (`--weights`), against the memory bandwidth it could reach.

Random-weight Hugging Face folders (bf16 safetensors, so bf16 loads as stored) with SmolLM2-135M's
configuration and a ~1B shape (dim 2048, 16 layers, MLP 8192, GQA 32/8, vocab 49152, tied);
for each --weights (f32 bf16 f16 int8 q4 nf4) and 1 and 2 threads, `leantune bench` runs a prefill
of 128 tokens then 128 single-token decode steps (median of --repeats runs after a warm-up) and
reports decode tok/s, the bytes one decode step streams (every weight but the embedding table) and
so GB/s; also per second of process CPU time (on a shared, loaded machine the 1-thread CPU-time
rate is what the decode reaches when it has a core). The machine's bandwidth: a STREAM-like triad (stream_triad.cpp, built here with g++) at the
same thread counts. llama.cpp's numbers come from bench/peers (llama-cpp-python has no wheel for
this platform on PyPI: it compiles llama.cpp from source).

Usage: .venv/bin/python bench/decode/bench_decode.py [--shapes smollm2,1b] [--weights f32,bf16,...]
       [--threads 1,2] [--repeats 1] [--bin build/bin/leantune]
Writes build/bench-decode.json and prints a Markdown table.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SHAPES = {
    "smollm2": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                    num_key_value_heads=3, vocab_size=49152, max_position_embeddings=8192, rms_norm_eps=1e-5,
                    rope_theta=100000.0, tie_word_embeddings=True),
    "1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
               num_key_value_heads=8, vocab_size=49152, max_position_embeddings=8192, rms_norm_eps=1e-5,
               rope_theta=100000.0, tie_word_embeddings=True),
}


def make_model(folder, cfg, dtype="bfloat16"):
    if (folder / "config.json").exists():
        return
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    m = LlamaForCausalLM(LlamaConfig(**cfg))
    m.to(getattr(torch, dtype)).save_pretrained(folder, safe_serialization=True)


def triad(threads, cache):
    exe = cache / "stream_triad"
    if not exe.exists():
        subprocess.run(["g++", "-O3", "-march=native", "-fopenmp", str(ROOT / "bench/decode/stream_triad.cpp"),
                        "-o", str(exe)], check=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_PROC_BIND="close")
    out = subprocess.run([str(exe), "256"], capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout)["triad_gb_s"]


def run(binary, model, weights, threads, prompt, decode, repeats):
    cmd = [binary, "bench", "--model", str(model), "--threads", str(threads), "--prompt-tokens", str(prompt),
           "--decode-tokens", str(decode), "--repeats", str(repeats), "--weights", weights]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return dict(error=(p.stderr.strip().splitlines() or ["failed"])[-1])
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="smollm2,1b")
    ap.add_argument("--weights", default="f32,bf16,f16,int8,q4,nf4")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--decode", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--bin", default=str(ROOT / "build" / "bin" / "leantune"))
    ap.add_argument("--cache", default=str(ROOT / "build" / "bench-models"))
    ap.add_argument("--out", default=str(ROOT / "build" / "bench-decode.json"))
    a = ap.parse_args()
    cache = pathlib.Path(a.cache)
    cache.mkdir(parents=True, exist_ok=True)
    threads = [int(t) for t in a.threads.split(",")]
    bw = {t: triad(t, cache) for t in threads}
    rows = []
    for shape in a.shapes.split(","):
        folder = cache / f"{shape}-random-bf16"
        make_model(folder, SHAPES[shape])
        for w in a.weights.split(","):
            for t in threads:
                r = run(a.bin, folder, w, t, a.prompt, a.decode, a.repeats)
                r.update(shape=shape, weights=w, threads=t, triad_gb_s=bw[t])
                rows.append(r)
                print(json.dumps(r), file=sys.stderr)
    pathlib.Path(a.out).write_text(json.dumps(rows, indent=1))
    print("| shape | weights | threads | MB/token | prefill tok/s | decode tok/s | decode GB/s | triad GB/s | % of triad "
          "| decode tok/CPU-s | GB/CPU-s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['shape']} | {r['weights']} | {r['threads']} | error: {r['error']} |||||")
            continue
        pct = 100 * r["decode_gb_s"] / r["triad_gb_s"]
        print(f"| {r['shape']} | {r['weights']} | {r['threads']} | {r['decode_bytes_per_token'] / 1e6:.0f} | "
              f"{r['prefill_tok_s']:.1f} | {r['decode_tok_s']:.2f} | {r['decode_gb_s']:.2f} | {r['triad_gb_s']:.1f} | "
              f"{pct:.0f}% | {r.get('decode_tok_per_cpu_s', 0):.2f} | {r.get('decode_tok_per_cpu_s', 0) * r['decode_bytes_per_token'] / 1e9:.2f} |")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Inference speed: leantune vs PyTorch (transformers, the peer) in one invocation.

Models: stories260K (llama2.c, ../shared; leantune only, transformers cannot read that format)
and a random-weight folder with SmolLM2-135M's configuration (both engines). fp32, 1 and 2
threads; prefill of --prompt tokens, then --decode single-token steps through the KV cache.
Prints a Markdown table with the ratio leantune / PyTorch and writes it as JSON next to it.

Usage: .venv/bin/python bench/bench_inference.py [--prompt 128 --decode 64 --threads 1,2]
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
SMOLLM2_135M = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                    num_key_value_heads=3, vocab_size=49152, max_position_embeddings=8192, rms_norm_eps=1e-5,
                    rope_theta=100000.0, tie_word_embeddings=True)


def make_smollm2(folder):
    if (folder / "config.json").exists():
        return
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(**SMOLLM2_135M)).save_pretrained(folder, safe_serialization=True)


def run_leantune(binary, model, threads, prompt, decode):
    out = subprocess.run([binary, "bench", "--model", str(model), "--threads", str(threads), "--prompt-tokens",
                          str(prompt), "--decode-tokens", str(decode)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_torch(folder, threads, prompt, decode, repeats=3):
    # in a subprocess so thread count and peak RSS are its own
    code = f"""
import json, resource, time, torch
from transformers import LlamaForCausalLM, DynamicCache
torch.set_num_threads({threads})
m = LlamaForCausalLM.from_pretrained({str(folder)!r}, dtype=torch.float32).eval()
g = torch.Generator().manual_seed(1234)
ids = torch.randint(0, m.config.vocab_size, ({prompt} + {decode},), generator=g)
pre, dec = [], []
with torch.inference_mode():
    for r in range({repeats} + 1):
        cache = DynamicCache()
        t0 = time.perf_counter()
        m(ids[None, :{prompt}], past_key_values=cache, use_cache=True)
        t1 = time.perf_counter()
        for i in range({decode}):
            m(ids[None, {prompt} + i:{prompt} + i + 1], past_key_values=cache, use_cache=True)
        t2 = time.perf_counter()
        if r:
            pre.append(t1 - t0); dec.append(t2 - t1)
pre.sort(); dec.sort()
print(json.dumps(dict(prefill_tok_s={prompt} / pre[len(pre) // 2], decode_tok_s={decode} / dec[len(dec) // 2],
                      peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--bin", default=str(ROOT / "build" / "bin" / "leantune"))
    ap.add_argument("--shared", default=os.environ.get("LEANTUNE_SHARED", str(ROOT.parent / "shared")))
    ap.add_argument("--cache", default=str(ROOT / "build" / "bench-models"))
    ap.add_argument("--out", default=str(ROOT / "build" / "bench-inference.json"))
    a = ap.parse_args()
    smol = pathlib.Path(a.cache) / "smollm2-135m-random"
    make_smollm2(smol)
    stories = pathlib.Path(a.shared) / "models" / "stories260K" / "stories260K.bin"
    rows = []
    for threads in [int(t) for t in a.threads.split(",")]:
        s = run_leantune(a.bin, stories, threads, a.prompt, a.decode)
        rows.append(dict(model="stories260K", threads=threads, leantune=s, torch=None))
        lt = run_leantune(a.bin, smol, threads, a.prompt, a.decode)
        pt = run_torch(smol, threads, a.prompt, a.decode)
        rows.append(dict(model="SmolLM2-135M shape (random)", threads=threads, leantune=lt, torch=pt))
    print(f"fp32, prompt {a.prompt} tokens, decode {a.decode} tokens, median of 3 after a warm-up\n")
    print("| model | threads | leantune prefill tok/s | PyTorch prefill tok/s | ratio | leantune decode tok/s "
          "| PyTorch decode tok/s | ratio | leantune peak RSS | PyTorch peak RSS |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        l, p = r["leantune"], r["torch"]
        f = lambda d, k: f"{d[k]:.1f}" if d else "-"
        ratio = lambda k: f"{l[k] / p[k]:.2f}x" if p else "-"
        mib = lambda d: f"{d['peak_rss_bytes'] / 2**20:.0f} MiB" if d else "-"
        print(f"| {r['model']} | {r['threads']} | {f(l, 'prefill_tok_s')} | {f(p, 'prefill_tok_s')} | "
              f"{ratio('prefill_tok_s')} | {f(l, 'decode_tok_s')} | {f(p, 'decode_tok_s')} | {ratio('decode_tok_s')} | "
              f"{mib(l)} | {mib(p)} |")
    pathlib.Path(a.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

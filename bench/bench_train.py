#!/usr/bin/env python3
"""Training speed and memory: leantune vs PyTorch + PEFT (the peer) in one invocation.

Workload (identical in both engines): a random-weight Hugging Face folder with SmolLM2-135M's
configuration, micro-batch 4 x 256 random tokens, AdamW; LoRA r=16 (alpha 32) on all seven linear
modules, and full fine-tuning; gradient checkpointing off and on (every block); fp32; the same
thread count. Reports the median step time after one warm-up step, tokens/s, peak RSS and the
ratio leantune / PyTorch, as a Markdown table, and writes the rows as JSON.

Usage: .venv/bin/python bench/bench_train.py [--threads 2 --steps 3 --modes lora,full --ckpt none,every]
"""
import argparse
import json
import pathlib
import subprocess
import sys

from bench_inference import ROOT, make_smollm2

PEER = r"""
import json, resource, sys, time, torch
from transformers import AutoModelForCausalLM
method, ckpt, threads, B, T, r, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
torch.set_num_threads(threads)
m = AutoModelForCausalLM.from_pretrained(sys.argv[8], dtype=torch.float32)
if ckpt != "none":
    m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    m.config.use_cache = False
if method == "lora":
    from peft import LoraConfig, get_peft_model
    m = get_peft_model(m, LoraConfig(r=r, lora_alpha=2 * r, lora_dropout=0.0, task_type="CAUSAL_LM",
                                     target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
    if ckpt != "none":
        m.enable_input_require_grads()
m.train()
opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-4)
g = torch.Generator().manual_seed(1234)
ids = torch.randint(0, m.config.vocab_size, (B, T), generator=g)
times = []
for s in range(steps + 1):
    t0 = time.perf_counter()
    loss = m(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if s:
        times.append(time.perf_counter() - t0)
times.sort()
print(json.dumps(dict(step_s=times[len(times) // 2], tokens_per_s=B * T / times[len(times) // 2],
                      peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)))
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", default="2")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--modes", default="lora,full")
    ap.add_argument("--ckpt", default="none,every")
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--bin", default=str(ROOT / "build" / "bin" / "leantune"))
    ap.add_argument("--cache", default=str(ROOT / "build" / "bench-models"))
    ap.add_argument("--out", default=str(ROOT / "build" / "bench-train.json"))
    a = ap.parse_args()
    smol = pathlib.Path(a.cache) / "smollm2-135m-random"
    make_smollm2(smol)
    rows = []
    for threads in a.threads.split(","):
        for method in a.modes.split(","):
            for ckpt in a.ckpt.split(","):
                ours = json.loads(subprocess.run(
                    [a.bin, "bench", "--train", "--model", str(smol), "--threads", threads, "--method", method,
                     "--lora-r", "16", "--micro-batch", str(a.batch), "--seq", str(a.seq), "--checkpointing", ckpt,
                     "--steps", str(a.steps)], capture_output=True, text=True, check=True).stdout.splitlines()[-1])
                peer = None
                if not a.no_peer:
                    out = subprocess.run([sys.executable, "-c", PEER, method, ckpt, threads, str(a.batch), str(a.seq),
                                          "16", str(a.steps), str(smol)], capture_output=True, text=True, check=True)
                    peer = json.loads(out.stdout.strip().splitlines()[-1])
                rows.append(dict(threads=int(threads), method=method, checkpointing=ckpt, leantune=ours, torch=peer))
    print(f"SmolLM2-135M shape (random), fp32, micro-batch {a.batch} x {a.seq}, AdamW, median of {a.steps} steps\n")
    print("| method | ckpt | threads | leantune tok/s | PyTorch+PEFT tok/s | ratio | leantune peak RSS | "
          "PyTorch peak RSS | RSS ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        l, p = r["leantune"], r["torch"]
        ratio = f"{l['tokens_per_s'] / p['tokens_per_s']:.2f}x" if p else "-"
        rss = f"{l['peak_rss_bytes'] / p['peak_rss_bytes']:.2f}x" if p else "-"
        print(f"| {r['method']} | {r['checkpointing']} | {r['threads']} | {l['tokens_per_s']:.0f} | "
              f"{p['tokens_per_s'] if p else 0:.0f} | {ratio} | {l['peak_rss_bytes'] / 2**20:.0f} MiB | "
              f"{(p['peak_rss_bytes'] / 2**20) if p else 0:.0f} MiB | {rss} |")
    pathlib.Path(a.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""leantune and llama.cpp (llama-cpp-python) on the same GGUF files: prefill and decode speed.

A random SmolLM2-135M-shaped (or ~1B-shaped: --shapes) Hugging Face folder (bench_decode.py's, bf16 safetensors) is exported
once per type with `leantune export --gguf` (f16, bf16, q8_0, q4_0), so both engines read the very
same file. For each type and 1 and 2 threads: llama.cpp (bench/peers/peers.py's timing script: a
prefill of --prompt tokens as one batch, then --decode single-token steps, median of --repeats
after a warm-up) and `leantune bench --model FILE.gguf --weights W` with the matching in-memory
format:
  f16 -> f16 (as stored), bf16 -> bf16 (as stored), q8_0 -> q8_0 (the blocks as stored),
  q4_0 -> q4_0 (the blocks as stored, llama.cpp's product).
The source folder holds bf16 weights, so the f16 file's values are all bf16 values, which leantune's
f16 prefill on an AMX CPU multiplies through the bf16 split (kernels/cpu/half_linear.cpp). Type
f16w is an f16 file exported from an f16 folder of the same shape (values that are generally not bf16s,
as in a model trained in fp16): the f16 prefill without that shortcut.
Prints a Markdown table with tok/s and leantune / llama.cpp ratios; writes --out (JSON).
Benchmark only (not a test): on a shared machine the numbers move with the load.

Usage: .venv/bin/python bench/decode/bench_gguf_peers.py [--shapes smollm2,1b] [--types f16,f16w,bf16,q8_0,q4_0] [--threads 1,2]
       [--prompt 128] [--decode 128] [--repeats 3] [--bin build/bin/leantune]
"""
import argparse
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "decode"))
sys.path.insert(0, str(ROOT / "bench" / "peers"))
from bench_decode import SHAPES, make_model  # noqa: E402
from peers import llama_cpp_infer  # noqa: E402

OURS = {"f16": "f16", "f16w": "f16", "bf16": "bf16", "q8_0": "q8_0", "q4_0": "q4_0"}


def write_tokenizer(folder, vocab_size):
    """A byte-level BPE of exactly vocab_size tokens (the 256 byte symbols, <|endoftext|>, then pairs of
    them, each with its merge), so the GGUF carries a full gpt2-style vocabulary for llama.cpp."""
    if (folder / "tokenizer.json").exists():
        return
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {c: i for i, c in enumerate(alphabet)}
    vocab["<|endoftext|>"] = len(vocab)
    merges = []
    for a in alphabet:
        for b in alphabet:
            if len(vocab) == vocab_size:
                break
            vocab[a + b] = len(vocab)
            merges.append((a, b))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|endoftext|>"])
    tok.save(str(folder / "tokenizer.json"))


def export(binary, folder, typ, out):
    if out.exists():
        return
    p = subprocess.run([binary, "export", "--gguf", str(out), "--type", typ, "--model", str(folder)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"leantune export --type {typ} failed: {p.stderr.strip()}")


def leantune(binary, gguf, weights, threads, prompt, decode, repeats):
    p = subprocess.run([binary, "bench", "--model", str(gguf), "--weights", weights, "--threads", str(threads),
                        "--prompt-tokens", str(prompt), "--decode-tokens", str(decode), "--repeats", str(repeats)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        return dict(error=(p.stderr.strip().splitlines() or ["failed"])[-1])
    return json.loads(p.stdout.strip().splitlines()[-1])


def cell(r, key):
    return f"{r[key]:.1f}" if key in r else r.get("error", "-")[:40]


def ratio(a, b, key):
    return f"{a[key] / b[key]:.2f}x" if key in a and key in b else "-"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="smollm2", help="smollm2 and / or 1b (bench_decode.py's shapes)")
    ap.add_argument("--types", default="f16,f16w,bf16,q8_0,q4_0")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--decode", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bin", default=str(ROOT / "build" / "bin" / "leantune"))
    ap.add_argument("--cache", default=str(ROOT / "build" / "bench-models"))
    ap.add_argument("--out", default=str(ROOT / "build" / "bench-gguf-peers.json"))
    a = ap.parse_args()
    cache = pathlib.Path(a.cache)
    cache.mkdir(parents=True, exist_ok=True)
    rows = []
    md = [f"prefill {a.prompt} + decode {a.decode}, median of {a.repeats} after a warm-up", "",
          "| shape | GGUF | leantune --weights | threads | leantune prefill tok/s | llama.cpp prefill tok/s | ratio | "
          "leantune decode tok/s | llama.cpp decode tok/s | ratio |", "|---|---|---|---|---|---|---|---|---|---|"]
    for shape in a.shapes.split(","):
        for typ in a.types.split(","):
            src = "float16" if typ == "f16w" else "bfloat16"
            folder = cache / f"{shape}-random-{'f16' if typ == 'f16w' else 'bf16'}"
            make_model(folder, SHAPES[shape], src)
            write_tokenizer(folder, SHAPES[shape]["vocab_size"])
            gguf = cache / f"{shape}-random-{typ}.gguf"
            export(a.bin, folder, OURS[typ], gguf)
            for t in (int(x) for x in a.threads.split(",")):
                ours = leantune(a.bin, gguf, OURS[typ], t, a.prompt, a.decode, a.repeats)
                peer = llama_cpp_infer(gguf, t, a.prompt, a.decode, a.repeats)
                rows.append(dict(shape=shape, gguf=typ, weights=OURS[typ], threads=t, leantune=ours, llama_cpp=peer))
                md.append(f"| {shape} | {typ} | {OURS[typ]} | {t} | {cell(ours, 'prefill_tok_s')} | "
                          f"{cell(peer, 'prefill_tok_s')} | {ratio(ours, peer, 'prefill_tok_s')} | "
                          f"{cell(ours, 'decode_tok_s')} | {cell(peer, 'decode_tok_s')} | "
                          f"{ratio(ours, peer, 'decode_tok_s')} |")
                print(md[-1], file=sys.stderr, flush=True)
    pathlib.Path(a.out).write_text(json.dumps(rows, indent=1))
    print("\n".join(md))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
# Benchmark of `leantune serve` (not a test): requests/s, generated tokens/s, time to first token
# (TTFT) and inter-token latency (ITL) p50 / p99 at concurrency 1, 4, 16 and 64 over streamed
# /v1/completions (greedy, ignore_eos, the same token-id prompts for every level); then TTFT for a
# 512-token prompt prefix seen before (prefix-cache hit) vs a fresh one (miss). Any OpenAI-style
# server can be measured with --url (e.g. llama-cpp-python's `python -m llama_cpp.server`); without
# it the script builds a random Llama model (transformers) and starts `leantune serve` on it.
#
#   .venv/bin/python bench/bench_serve.py                       # random ~30M-parameter Llama
#   .venv/bin/python bench/bench_serve.py --url http://127.0.0.1:8080 --model-name NAME
import argparse
import concurrent.futures
import http.client
import json
import pathlib
import random
import re
import subprocess
import sys
import tempfile
import time
import urllib.parse

ROOT = pathlib.Path(__file__).resolve().parents[1]


def build_model(folder, vocab):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    sys.path.insert(0, str(ROOT / "tests" / "python"))
    from test_gguf_export import byte_level_tokenizer
    torch.manual_seed(0)
    c = LlamaConfig(hidden_size=512, intermediate_size=1408, num_hidden_layers=8, num_attention_heads=8,
                    num_key_value_heads=4, vocab_size=vocab, max_position_embeddings=2048, tie_word_embeddings=False)
    LlamaForCausalLM(c).save_pretrained(folder, safe_serialization=True)
    byte_level_tokenizer(folder, vocab)
    return sum(p.numel() for p in LlamaForCausalLM(c).parameters())


def start_server(binary, folder, threads, extra):
    p = subprocess.Popen([binary, "serve", "--model", str(folder), "--served-model-name", "bench", "--port", "0",
                          "--context", "1024", "--max-seqs", "64", "-t", str(threads), *extra],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = ""
    deadline = time.time() + 120
    while time.time() < deadline and "listening on" not in line:
        line = p.stdout.readline()
        if not line and p.poll() is not None:
            break
    m = re.search(r"http://[\d.]+:(\d+)", line)
    if not m:
        p.kill()
        raise SystemExit(f"server did not start: {p.stderr.read()}")
    return p, f"http://127.0.0.1:{m.group(1)}"


def stream_request(url, model, prompt, max_tokens):
    """One streamed completion: (TTFT seconds, [gaps between later tokens], tokens, total seconds)."""
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "stream": True, "ignore_eos": True})
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]!r}")
    times = []
    buf = b""
    while True:
        chunk = r.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            if not ev.startswith(b"data: ") or ev == b"data: [DONE]":
                continue
            j = json.loads(ev[6:])
            if j.get("choices") and j["choices"][0].get("text"):
                times.append(time.perf_counter())
    total = time.perf_counter() - t0
    conn.close()
    if not times:
        return None
    return times[0] - t0, [b - a for a, b in zip(times, times[1:])], len(times), total


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))] if xs else float("nan")


def level(url, model, prompts, max_tokens, concurrency, n_requests):
    jobs = [prompts[i % len(prompts)] for i in range(n_requests)]
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as ex:
        res = [r for r in ex.map(lambda p: stream_request(url, model, p, max_tokens), jobs) if r]
    wall = time.perf_counter() - t0
    ttft = [r[0] for r in res]
    itl = [g for r in res for g in r[1]]
    toks = sum(r[2] for r in res)
    return {"concurrency": concurrency, "requests": len(res), "req_s": len(res) / wall, "tok_s": toks / wall,
            "ttft_p50": pct(ttft, 50), "ttft_p99": pct(ttft, 99), "itl_p50": pct(itl, 50), "itl_p99": pct(itl, 99)}


def prefix_ttft(url, model, vocab, rounds, rng):
    """TTFT of a request whose 512-token prefix is new (miss), then of one sharing it (hit)."""
    miss, hit = [], []
    for _ in range(rounds):
        prefix = [rng.randrange(1, vocab) for _ in range(512)]
        miss.append(stream_request(url, model, prefix + [rng.randrange(1, vocab) for _ in range(8)], 1)[0])
        hit.append(stream_request(url, model, prefix + [rng.randrange(1, vocab) for _ in range(8)], 1)[0])
    return pct(miss, 50), pct(hit, 50)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--url", help="a running server (default: start leantune serve on a random model)")
    ap.add_argument("--model-name", default="bench")
    ap.add_argument("--binary", default=str(ROOT / "build" / "bin" / "leantune"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=300)
    ap.add_argument("--concurrency", default="1,4,16,64")
    ap.add_argument("--requests", type=int, default=0, help="requests per level (default: concurrency, at least 4)")
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--prefix-rounds", type=int, default=5)
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args()
    rng = random.Random(0)
    proc, tmp = None, None
    url = a.url
    if not url:
        tmp = tempfile.TemporaryDirectory()
        n = build_model(pathlib.Path(tmp.name), a.vocab)
        print(f"random Llama: {n / 1e6:.1f}M parameters, 8 layers, hidden 512, vocab {a.vocab}")
        proc, url = start_server(a.binary, tmp.name, a.threads, [])
    try:
        prompts = [[rng.randrange(1, a.vocab) for _ in range(a.prompt_tokens)] for _ in range(16)]
        stream_request(url, a.model_name, prompts[0], 4)  # warm up
        rows = []
        print(f"{'conc':>5} {'reqs':>5} {'req/s':>8} {'tok/s':>8} {'TTFT p50':>9} {'TTFT p99':>9} {'ITL p50':>8} "
              f"{'ITL p99':>8}  (seconds; prompt {a.prompt_tokens} tokens, {a.max_tokens} generated, greedy)")
        for c in [int(x) for x in a.concurrency.split(",")]:
            r = level(url, a.model_name, prompts, a.max_tokens, c, a.requests or max(4, c))
            rows.append(r)
            print(f"{c:>5} {r['requests']:>5} {r['req_s']:>8.2f} {r['tok_s']:>8.1f} {r['ttft_p50']:>9.3f} "
                  f"{r['ttft_p99']:>9.3f} {r['itl_p50']:>8.4f} {r['itl_p99']:>8.4f}", flush=True)
        miss, hit = prefix_ttft(url, a.model_name, a.vocab, a.prefix_rounds, rng)
        print(f"512-token shared prefix: TTFT p50 miss {miss:.3f} s, hit {hit:.3f} s ({miss / hit:.1f}x lower on a hit)")
        if a.json:
            pathlib.Path(a.json).write_text(json.dumps({"levels": rows, "prefix_miss": miss, "prefix_hit": hit}))
    finally:
        if proc:
            proc.terminate()
            proc.wait(timeout=30)
        if tmp:
            tmp.cleanup()


if __name__ == "__main__":
    main()

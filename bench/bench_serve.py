#!/usr/bin/env python3
# Benchmark of `leantune serve` against llama.cpp's server (llama-cpp-python's `python -m
# llama_cpp.server`), not a test. One invocation:
#   1. makes (once, cached in build/bench-models) a random SmolLM2-135M-shaped Llama (bf16 safetensors,
#      bench/decode/bench_decode.py's shape) with an ASCII-only byte-level BPE of 49152 tokens (so every
#      generated token is whole text and both servers stream one event per token), and exports it with
#      `leantune export --gguf --type f16`;
#   2. serves that one GGUF file with each server in turn, the same thread count, and sends both the
#      same text prompts (checked to be the same number of tokens on both), the same max_tokens, greedy,
#      EOS never ending a request (leantune: ignore_eos; llama.cpp: logit_bias -1e9 on EOS; each
#      request is checked to return exactly max_tokens tokens);
#   3. prints requests/s, generated tokens/s, time to first token (TTFT) and inter-token latency (ITL)
#      p50 / p99 at concurrency 1, 4, 16 and 64 for both, the ratios, and leantune's TTFT for a
#      512-token prompt prefix seen before (prefix-cache hit) vs a fresh one (miss).
# leantune serves the f16 file's values as f32 (its batch engine's only weight type); llama.cpp
# computes on the f16 weights. llama-cpp-python's server holds one llama_context behind a lock: it runs
# one request at a time (no parallel slots; concurrent requests queue); it is started with
# --interrupt_requests False so a queued request does not cut the running stream short.
#
#   .venv/bin/python bench/bench_serve.py                      # both servers, 1,4,16,64
#   .venv/bin/python bench/bench_serve.py --servers leantune   # ours only
#   .venv/bin/python bench/bench_serve.py --url http://127.0.0.1:8080 --model-name NAME  # any running server
import argparse
import concurrent.futures
import http.client
import json
import os
import pathlib
import random
import re
import socket
import subprocess
import sys
import time
import urllib.parse

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench" / "decode"))
EOS = "<|endoftext|>"


def ascii_tokenizer(folder, vocab_size):
    """A byte-level BPE of exactly vocab_size tokens over printable ASCII and newline only: the symbols,
    <|endoftext|>, then pairs, then triples (each with its merge). Every token decodes to whole text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    # the GPT-2 byte -> symbol map (printable ASCII maps to itself, space to 'Ġ', newline to 'Ċ')
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    b2u = dict(zip(bs, map(chr, cs)))
    alphabet = [b2u[b] for b in [10] + list(range(32, 127))]
    vocab = {c: i for i, c in enumerate(alphabet)}
    vocab[EOS] = len(vocab)
    merges = []
    for a in alphabet:
        for b in alphabet:
            vocab[a + b] = len(vocab)
            merges.append((a, b))
    for ab in [a + b for a in alphabet for b in alphabet]:
        for c in alphabet:
            if len(vocab) == vocab_size:
                break
            vocab[ab + c] = len(vocab)
            merges.append((ab, c))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([EOS])
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"bos_token": EOS, "eos_token": EOS}))
    return vocab[EOS]


def build_model(binary, cache, gguf_type):
    """The random SmolLM2-135M-shaped model folder and its GGUF export (made once)."""
    from bench_decode import SHAPES, make_model
    folder = cache / "smollm2-random-ascii"
    make_model(folder, SHAPES["smollm2"])
    if not (folder / "tokenizer.json").exists():
        ascii_tokenizer(folder, SHAPES["smollm2"]["vocab_size"])
    eos = json.loads((folder / "tokenizer.json").read_text())["model"]["vocab"][EOS]
    gguf = cache / f"smollm2-random-ascii-{gguf_type}.gguf"
    if not gguf.exists():
        p = subprocess.run([binary, "export", "--gguf", str(gguf), "--type", gguf_type, "--model", str(folder)],
                           capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"leantune export --gguf failed: {p.stderr.strip()}")
    return gguf, eos


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_env(threads, wait_policy):
    """Both servers' OpenMP (leantune's kernels; ggml as llama-cpp-python builds it) wait the same way.
    On a loaded machine the default spinning costs a scheduling quantum at every barrier."""
    return dict(os.environ, OMP_NUM_THREADS=str(threads), **({"OMP_WAIT_POLICY": wait_policy} if wait_policy else {}))


def start_leantune(binary, model, threads, context, extra, env):
    p = subprocess.Popen([binary, "serve", "--model", str(model), "--served-model-name", "bench", "--port", "0",
                          "--context", str(context), "--max-seqs", "64", "-t", str(threads), *extra],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = ""
    deadline = time.time() + 300
    while time.time() < deadline and "listening on" not in line:
        line = p.stdout.readline()
        if not line and p.poll() is not None:
            break
    m = re.search(r"http://[\d.]+:(\d+)", line)
    if not m:
        p.kill()
        raise SystemExit(f"leantune serve did not start: {p.stderr.read()}")
    return p, f"http://127.0.0.1:{m.group(1)}"


def start_llama_cpp(model, threads, context, env):
    port = free_port()
    p = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", "bench",
                          "--host", "127.0.0.1", "--port", str(port), "--n_threads", str(threads),
                          "--n_threads_batch", str(threads), "--n_ctx", str(context), "--n_batch", "512",
                          "--interrupt_requests", "False", "--verbose", "False"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 300
    while time.time() < deadline:
        if p.poll() is not None:
            raise SystemExit(f"llama_cpp.server did not start: {p.stderr.read()[-2000:]}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/v1/models")
            if c.getresponse().status == 200:
                return p, url
        except OSError:
            time.sleep(0.5)
    p.kill()
    raise SystemExit("llama_cpp.server did not answer within 300 s")


def post(url, body):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {data[:300]!r}")
    return json.loads(data)


def stream_request(url, body):
    """One streamed completion: (TTFT seconds, [gaps between later tokens], token events, total seconds)."""
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", json.dumps({**body, "stream": True}), {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]!r}")
    times = []
    buf = b""
    while True:
        chunk = r.read1(65536)
        if not chunk:
            break
        buf += chunk.replace(b"\r\n", b"\n")
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


def level(url, body_of, prompts, concurrency, n_requests):
    jobs = [prompts[i % len(prompts)] for i in range(n_requests)]
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as ex:
        res = [r for r in ex.map(lambda p: stream_request(url, body_of(p)), jobs) if r]
    wall = time.perf_counter() - t0
    ttft = [r[0] for r in res]
    itl = [g for r in res for g in r[1]]
    toks = sum(r[2] for r in res)
    return {"concurrency": concurrency, "requests": len(res), "tokens": toks, "wall_s": wall, "req_s": len(res) / wall,
            "tok_s": toks / wall, "ttft_p50": pct(ttft, 50), "ttft_p99": pct(ttft, 99), "itl_p50": pct(itl, 50),
            "itl_p99": pct(itl, 99)}


def prefix_ttft(url, body_of, rounds, rng, tok):
    """TTFT of a request whose 512-token prefix is new (miss), then of one sharing it (hit)."""
    miss, hit = [], []
    for _ in range(rounds):
        prefix = random_text(rng, 512, tok)
        miss.append(stream_request(url, {**body_of(prefix + random_text(rng, 8, tok)), "max_tokens": 1})[0])
        hit.append(stream_request(url, {**body_of(prefix + random_text(rng, 8, tok)), "max_tokens": 1})[0])
    return pct(miss, 50), pct(hit, 50)


def random_text(rng, n_tokens, tok=None):
    """Random lowercase text; with the tokenizer, cut to n_tokens of its tokens (about 2 characters each)."""
    text = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(3 * n_tokens))
    return tok.decode(tok.encode(text).ids[:n_tokens]) if tok else text[:2 * n_tokens]


def header(prompt_tokens, max_tokens):
    return (f"{'server':>9} {'conc':>5} {'reqs':>5} {'req/s':>8} {'tok/s':>8} {'TTFT p50':>9} {'TTFT p99':>9} "
            f"{'ITL p50':>8} {'ITL p99':>8}  (seconds; prompt {prompt_tokens} tokens, {max_tokens} generated, greedy)")


def row_text(name, r):
    return (f"{name:>9} {r['concurrency']:>5} {r['requests']:>5} {r['req_s']:>8.2f} {r['tok_s']:>8.1f} "
            f"{r['ttft_p50']:>9.3f} {r['ttft_p99']:>9.3f} {r['itl_p50']:>8.4f} {r['itl_p99']:>8.4f}")


def check_counts(name, url, body_of, prompts, max_tokens, seen):
    """Non-streamed requests: every prompt is as many tokens on this server as on the ones before, and
    exactly max_tokens come back. Returns the first prompt's tokens and text (greedy, for comparison)."""
    for i, p in enumerate(prompts[:4]):
        r = post(url, body_of(p))
        u = r["usage"]
        seen.setdefault(i, u["prompt_tokens"])
        if u["prompt_tokens"] != seen[i] or u["completion_tokens"] != max_tokens:
            sys.exit(f"{name}: prompt {i}: usage {u}, expected {seen[i]} prompt and {max_tokens} completion tokens")
        if i == 0:
            first = r["choices"][0]["text"]
    return first


def run_server(name, url, body_of, prompts, a, levels, rng):
    stream_request(url, {**body_of(prompts[0]), "max_tokens": 4})  # warm up
    out = {}
    if name != "url":
        out["greedy_text"] = check_counts(name, url, body_of, prompts, a.max_tokens, a.seen_prompt_tokens)
    rows = []
    for c in levels:
        r = level(url, body_of, prompts, c, a.requests or max(4, c))
        rows.append(r)
        print(row_text(name, r), flush=True)
    out["levels"] = rows
    if name != "llama.cpp" and a.prefix_rounds > 0:
        miss, hit = prefix_ttft(url, body_of, a.prefix_rounds, rng, a.tok)
        out.update(prefix_miss=miss, prefix_hit=hit)
        print(f"{name:>9}: 512-token shared prefix, TTFT p50 miss {miss:.3f} s, hit {hit:.3f} s "
              f"({miss / hit:.1f}x lower on a hit)", flush=True)
    return out


def stop(proc):
    if proc and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--url", help="measure this running server only (token-count checks skipped)")
    ap.add_argument("--model-name", default="bench")
    ap.add_argument("--servers", default="leantune,llama.cpp")
    ap.add_argument("--binary", default=str(ROOT / "build" / "bin" / "leantune"))
    ap.add_argument("--cache", default=str(ROOT / "build" / "bench-models"))
    ap.add_argument("--gguf-type", default="f16", help="the one GGUF both servers load (f16, f32, bf16, q8_0)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--concurrency", default="1,4,16,64")
    ap.add_argument("--requests", type=int, default=0, help="requests per level (default: concurrency, at least 4)")
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--prefix-rounds", type=int, default=5)
    ap.add_argument("--omp-wait-policy", default="passive",
                    help="OMP_WAIT_POLICY for both servers ('' leaves the environment's)")
    ap.add_argument("--leantune-args", default="", help="extra `leantune serve` flags")
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args()
    rng = random.Random(0)
    levels = [int(x) for x in a.concurrency.split(",")]
    a.tok, a.seen_prompt_tokens = None, {}
    if a.url:
        prompts = [random_text(rng, a.prompt_tokens) for _ in range(16)]
        print(header(f"~{a.prompt_tokens}", a.max_tokens))
        body_of = lambda p: {"model": a.model_name, "prompt": p, "max_tokens": a.max_tokens, "temperature": 0,
                             "ignore_eos": True}
        res = {"url": run_server("url", a.url, body_of, prompts, a, levels, rng)}
    else:
        cache = pathlib.Path(a.cache)
        cache.mkdir(parents=True, exist_ok=True)
        gguf, eos = build_model(a.binary, cache, a.gguf_type)
        from tokenizers import Tokenizer
        a.tok = Tokenizer.from_file(str(cache / "smollm2-random-ascii" / "tokenizer.json"))
        prompts = [random_text(rng, a.prompt_tokens, a.tok) for _ in range(16)]
        print(f"random SmolLM2-135M-shaped Llama, {gguf.name} served by both; {a.threads} threads each, "
              f"OMP_WAIT_POLICY={a.omp_wait_policy or os.environ.get('OMP_WAIT_POLICY', '(unset)')}")
        print(header(a.prompt_tokens, a.max_tokens))
        base = {"model": "bench", "max_tokens": a.max_tokens, "temperature": 0}
        bodies = {"leantune": lambda p: {**base, "prompt": p, "ignore_eos": True},
                  "llama.cpp": lambda p: {**base, "prompt": p, "logit_bias": {str(eos): -1e9}}}
        res = {}
        env = server_env(a.threads, a.omp_wait_policy)
        for name in a.servers.split(","):
            if name == "leantune":
                proc, url = start_leantune(a.binary, gguf, a.threads, a.context, a.leantune_args.split(), env)
            else:
                proc, url = start_llama_cpp(gguf, a.threads, a.context, env)
            try:
                res[name] = run_server(name, url, bodies[name], prompts, a, levels, rng)
            finally:
                stop(proc)
        if "leantune" in res and "llama.cpp" in res:
            same = res["leantune"]["greedy_text"] == res["llama.cpp"]["greedy_text"]
            print(f"greedy output of prompt 0 ({a.max_tokens} tokens) the same on both servers: {same}")
            print("leantune / llama.cpp:  (llama-cpp-python's server runs one request at a time)")
            for ours, peer in zip(res["leantune"]["levels"], res["llama.cpp"]["levels"]):
                print(f"  concurrency {ours['concurrency']:>3}: tok/s {ours['tok_s'] / peer['tok_s']:.2f}x, "
                      f"req/s {ours['req_s'] / peer['req_s']:.2f}x, TTFT p50 {peer['ttft_p50'] / ours['ttft_p50']:.2f}x "
                      f"lower, ITL p50 {peer['itl_p50'] / ours['itl_p50']:.2f}x lower")
    print(f"load average (1, 5, 15 min) at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"{a.threads} threads per server, {os.cpu_count()} CPUs")
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()

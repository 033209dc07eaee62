#!/usr/bin/env python3
"""leantune against the engines people use, on identical workloads, in one invocation.

Training (PyTorch + PEFT, the peer): random-weight Hugging Face folders with SmolLM2-135M's
configuration, Qwen2.5-0.5B's (vocab 151,936, GQA 7:1, q/k/v biases, tied; --models qwen) and a
wider ~1B shape (shorter run); the same token batches (micro-batch 4 x 512
random tokens), LoRA r=16 (alpha 32) on all seven linear modules, AdamW lr 1e-4; fp32 and bf16
(torch.autocast on CPU; leantune's bf16 rows appear once it trains in bf16); with and without
gradient checkpointing; 1 and 2 threads. --methods qlora: the base as NF4 (double quantization) through
bitsandbytes on the peer's side (compute dtype bf16 under autocast), --quantize nf4 --double-quant on ours. Median step time after one warm-up step, tokens/s, peak
RSS, and leantune / PyTorch ratios. leantune runs twice per row: `bench --train --profile` (the
timed steps, and a per-op table of where their time goes, printed after the tables) and the whole
`leantune train` pipeline on a real corpus (Aesop's Fables from ../shared, tokenized by a
byte-level BPE trained on it, packed into 512-token rows with document masks, a checkpoint saved
half way, metrics logged): its own tokens/s over all its steps, warm-up included.

Inference (llama.cpp through llama-cpp-python, the peer): the same SmolLM2-shaped weights
converted to GGUF at f32, f16 and q8_0 (leantune runs f32 against f32 and f16, and its LLM.int8
weights against q8_0); prefill of 128 tokens, then 64
single-token decode steps through the KV cache.

Writes build/peers/results.json and results.md. Usage:
  .venv/bin/python bench/peers/peers.py [--quick] [--threads 1,2] [--steps 3] [--models smol,qwen,wide]
                                        [--methods lora,qlora,full] [--precisions fp32,bf16] [--compiled]
                                        [--skip-train] [--skip-infer]
"""
import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
from bench_inference import SMOLLM2_135M  # noqa: E402
from bench_train import PEER as TORCH_TRAIN  # noqa: E402

WIDE_1B = dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
               num_key_value_heads=8, vocab_size=49152, max_position_embeddings=8192, rms_norm_eps=1e-5,
               rope_theta=100000.0, tie_word_embeddings=True)
QWEN25_05B = dict(model_type="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                  num_attention_heads=14, num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768,
                  rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True)

# bf16 peer: the same script with the step under torch.autocast("cpu", dtype=torch.bfloat16)
TORCH_TRAIN_BF16 = TORCH_TRAIN.replace(
    "    loss = m(input_ids=ids, labels=ids).loss\n",
    "    with torch.autocast('cpu', dtype=torch.bfloat16):\n        loss = m(input_ids=ids, labels=ids).loss\n")
assert TORCH_TRAIN_BF16 != TORCH_TRAIN
# QLoRA (--methods qlora): the base loaded through bitsandbytes as NF4 with double quantization,
# compute_dtype bf16 under autocast (fp32 otherwise), PEFT's LoRA on top, as QLoRA runs on a CPU;
# leantune: --quantize nf4 --double-quant (its bf16 runs decode the NF4 tiles into bf16 GEMM panels)
QLORA_LOAD = ("m = AutoModelForCausalLM.from_pretrained(sys.argv[8], dtype=torch.float32)\n",
              "from transformers import BitsAndBytesConfig\n"
              "q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type='nf4', bnb_4bit_use_double_quant=True,\n"
              "                       bnb_4bit_compute_dtype=COMPUTE)\n"
              "m = AutoModelForCausalLM.from_pretrained(sys.argv[8], dtype=torch.float32, quantization_config=q,\n"
              "                                         device_map='cpu')\n")
QLORA_METHOD = ('if method == "lora":\n', 'if method in ("lora", "qlora"):\n')


def qlora_script(script, precision):
    out = script.replace(*QLORA_LOAD).replace(*QLORA_METHOD)
    assert "BitsAndBytesConfig" in out and '"qlora"' in out
    return out.replace("COMPUTE", "torch.float32" if precision == "fp32" else "torch.bfloat16")


# the second peer row (--compiled): the same steps through torch.compile (inductor; the warm-up step
# compiles, and is not timed)
COMPILED = ("m.train()\n", "m.train()\nfwd = torch.compile(m)\n")
CALL = ("loss = m(input_ids=ids, labels=ids).loss", "loss = fwd(input_ids=ids, labels=ids).loss")


def make_model(folder, cfg):
    if (folder / "config.json").exists():
        return
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(0)
    cfg = dict(cfg)
    if cfg.pop("model_type", "llama") == "qwen2":
        Qwen2ForCausalLM(Qwen2Config(**cfg)).save_pretrained(folder, safe_serialization=True)
    else:
        LlamaForCausalLM(LlamaConfig(**cfg)).save_pretrained(folder, safe_serialization=True)


def profile_table(stderr):
    """The per-op rows `bench --train --profile` prints on stderr: (op, calls, self ms, share, GFLOP/s)."""
    rows, on = [], False
    for line in stderr.splitlines():
        if line.startswith("profile (measured steps)"):
            on = True
            continue
        if not on or line.startswith("op ") or line.startswith("total") or line.startswith("wrote"):
            continue
        f = line.split()  # name (may hold spaces), calls, self ms, share, GFLOP/s, GB/s
        if len(f) < 6 or not f[-3].endswith("%"):
            continue
        rows.append(dict(op=" ".join(f[:-5]), calls=int(f[-5]), self_ms=float(f[-4]), share=f[-3],
                         gflops=float(f[-2])))
    return rows


def leantune_train(binary, model, threads, ckpt, batch, seq, steps, precision, method="lora"):
    with tempfile.TemporaryDirectory() as tmp:
        quant = ["--quantize", "nf4", "--double-quant"] if method == "qlora" else []
        cmd = [binary, "bench", "--train", "--model", str(model), "--threads", str(threads),
               "--method", "lora" if method == "qlora" else method, *quant, "--lora-r", "16", "--micro-batch", str(batch), "--seq", str(seq), "--checkpointing", ckpt,
               "--steps", str(steps), "--profile", str(pathlib.Path(tmp) / "trace.json")]
        if precision != "fp32":
            cmd += ["--precision", precision]
        p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return dict(error=(p.stderr.strip().splitlines() or ["failed"])[-1])
    r = json.loads(p.stdout.strip().splitlines()[-1])
    r["profile"] = profile_table(p.stderr)
    return r


AESOP = ROOT.parent / "shared" / "data" / "aesop_fables" / "aesop_fables.txt"


def aesop_tokenizer(cache):
    """A byte-level BPE (4096 ids, all below every benchmark model's vocabulary) trained on the Aesop
    corpus, so `leantune train` reads real text through a real tokenizer."""
    path = cache / "aesop-bpe" / "tokenizer.json"
    if not path.exists():
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        tok.train([str(AESOP)], trainers.BpeTrainer(vocab_size=4096, special_tokens=["<|endoftext|>"],
                                                    initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
        path.parent.mkdir(parents=True, exist_ok=True)
        tok.save(str(path))
    return path


def leantune_train_pipeline(binary, model, tokenizer, threads, ckpt, batch, seq, steps, precision, method="lora"):
    """`leantune train` end to end: config, tokenization, packing, steps + 1 steps (the first one
    is its warm-up), a checkpoint half way and at the end, metrics.jsonl. Returns its last
    tokens/s record (all steps, the warm-up included) and the process's wall time."""
    if not AESOP.exists():
        return dict(error=f"{AESOP} not found")
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "out"
        total = steps + 1
        lora = dict(lora_r=16, lora_alpha=32, lora_target_modules="all-linear") if method != "full" else {}
        if method == "qlora":
            lora.update(quantization="nf4", double_quant=True)
        cfg = dict(base_model=str(model), tokenizer=str(tokenizer), datasets=[dict(path=str(AESOP), min_blank_lines=2)],
                   method="lora" if method == "qlora" else method, **lora, micro_batch_size=batch, sequence_len=seq, learning_rate=1e-4, warmup_steps=0,
                   max_steps=total,
                   save_steps=max(1, total // 2), precision=precision, gradient_checkpointing=ckpt, threads=threads,
                   output_dir=str(out))
        (pathlib.Path(tmp) / "c.yaml").write_text(json.dumps(cfg))  # JSON is YAML
        t0 = time.perf_counter()
        p = subprocess.run([binary, "train", str(pathlib.Path(tmp) / "c.yaml")], capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if p.returncode != 0:
            return dict(error=(p.stderr.strip().splitlines() or ["failed"])[-1])
        recs = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines() if l.strip()]
        steps_recs = [r for r in recs if "tokens_per_s" in r]
        return dict(tokens_per_s=steps_recs[-1]["tokens_per_s"], steps=len(steps_recs), wall_s=wall,
                    peak_rss_bytes=max(r["rss_bytes"] for r in steps_recs))


def torch_train(model, threads, ckpt, batch, seq, steps, precision, compiled=False, method="lora"):
    script = TORCH_TRAIN if precision == "fp32" else TORCH_TRAIN_BF16
    if method == "qlora":
        script = qlora_script(script, precision)
    if compiled:
        script = script.replace(*COMPILED).replace(*CALL)
        assert "fwd(input_ids" in script and "torch.compile" in script
    p = subprocess.run([sys.executable, "-c", script, method, ckpt, str(threads), str(batch), str(seq), "16",
                        str(steps), str(model)], capture_output=True, text=True)
    if p.returncode != 0:
        return dict(error=(p.stderr.strip().splitlines() or ["failed"])[-1])
    return json.loads(p.stdout.strip().splitlines()[-1])


def permute_qk(w, n_head):
    # HF stores q/k rows for rotate-half RoPE; llama.cpp's llama arch rotates interleaved pairs
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def to_gguf(folder, out, kind):
    """The HF folder as a llama-architecture GGUF (f32 / f16 / q8_0) with a placeholder SentencePiece
    vocabulary (the benchmark feeds token ids, so the vocabulary's strings never matter)."""
    if out.exists():
        return
    import gguf
    import numpy as np
    from safetensors.numpy import load_file
    cfg = json.loads((folder / "config.json").read_text())
    t = load_file(str(folder / "model.safetensors"))
    w = gguf.GGUFWriter(str(out) + ".tmp", "llama")
    C, L, NH, NKV = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(C)
    w.add_block_count(L)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(NH)
    w.add_head_count_kv(NKV)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(cfg.get("rope_theta") or cfg.get("rope_parameters", {}).get("rope_theta", 10000.0))
    w.add_rope_dimension_count(C // NH)
    w.add_vocab_size(cfg["vocab_size"])
    w.add_file_type({"f32": 0, "f16": 1, "q8_0": 7}[kind])
    V = cfg["vocab_size"]
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    tokens += [f"tok{i}" for i in range(V - len(tokens))]
    types = [2, 3, 3] + [6] * 256 + [1] * (V - 259)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * V)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    names = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}

    def put(name, a):
        a = np.ascontiguousarray(a.astype(np.float32))
        if a.ndim == 1 or kind == "f32":
            w.add_tensor(name, a)
        elif kind == "f16":
            w.add_tensor(name, a.astype(np.float16))
        else:
            q = gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)

    put("token_embd.weight", t["model.embed_tokens.weight"])
    put("output_norm.weight", t["model.norm.weight"])
    if "lm_head.weight" in t:
        put("output.weight", t["lm_head.weight"])
    for l in range(L):
        for hf, gg in names.items():
            a = t[f"model.layers.{l}.{hf}.weight"]
            if hf == "self_attn.q_proj":
                a = permute_qk(a, NH)
            if hf == "self_attn.k_proj":
                a = permute_qk(a, NKV)
            put(f"blk.{l}.{gg}.weight", a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    pathlib.Path(str(out) + ".tmp").rename(out)


LLAMA_CPP = r"""
import json, resource, sys, time
import numpy as np
import llama_cpp
from llama_cpp import Llama
path, threads, prompt, decode, repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
if sys.argv[6] == "0":  # no extra buffer types (llama.cpp's AMX / repacked weights)
    default_params = llama_cpp.llama_model_default_params
    def without_extra_bufts():
        p = default_params()
        p.use_extra_bufts = False
        return p
    llama_cpp.llama_cpp.llama_model_default_params = without_extra_bufts
llm = Llama(model_path=path, n_ctx=prompt + decode + 8, n_threads=threads, n_threads_batch=threads,
            n_batch=prompt, n_ubatch=prompt, verbose=False, logits_all=False)
rng = np.random.default_rng(1234)
ids = [int(x) for x in rng.integers(3, llm.n_vocab(), prompt + decode)]
pre, dec = [], []
for r in range(repeats + 1):
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(ids[:prompt])
    t1 = time.perf_counter()
    for i in range(decode):
        llm.eval([ids[prompt + i]])
    t2 = time.perf_counter()
    if r:
        pre.append(t1 - t0); dec.append(t2 - t1)
pre.sort(); dec.sort()
print(json.dumps(dict(prefill_tok_s=prompt / pre[len(pre) // 2], decode_tok_s=decode / dec[len(dec) // 2],
                      peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)))
"""


def llama_cpp_infer(gguf_path, threads, prompt, decode, repeats):
    """llama.cpp as it runs by default; where that dies by a signal (its AMX int8 path segfaulted on
    q8_0 / q4_0 on a Sapphire Rapids VM with llama-cpp-python 0.3.36, on leantune's exported files and
    on a q8_0 file llama.cpp's own llama_model_quantize wrote alike), again without its extra buffer
    types (plain CPU kernels), noted in the result."""
    for extra in ("1", "0"):
        p = subprocess.run([sys.executable, "-c", LLAMA_CPP, str(gguf_path), str(threads), str(prompt), str(decode),
                            str(repeats), extra], capture_output=True, text=True)
        if p.returncode == 0:
            r = json.loads(p.stdout.strip().splitlines()[-1])
            if extra == "0":
                r["note"] = "extra buffer types off: the default run died by signal"
                print(f"llama.cpp on {pathlib.Path(gguf_path).name}, {threads} threads: the default run died by signal "
                      f"{-crashed}; measured with use_extra_bufts=False (no AMX / repacked weights)", flush=True)
            return r
        if p.returncode > 0:
            break
        crashed = p.returncode
    return dict(error=(p.stderr.strip().splitlines() or ["failed"])[-1])


def leantune_infer(binary, model, threads, prompt, decode, repeats, quantize=None):
    p = subprocess.run([binary, "bench", "--model", str(model), "--threads", str(threads), "--prompt-tokens",
                        str(prompt), "--decode-tokens", str(decode), "--repeats", str(repeats)] +
                       (["--quantize", quantize] if quantize else []), capture_output=True, text=True)
    if p.returncode != 0:
        return dict(error=(p.stderr.strip().splitlines() or ["failed"])[-1])
    return json.loads(p.stdout.strip().splitlines()[-1])


def profile_md(profiles, top=8):
    """Per row, the ops that took most of the measured steps (self time: an op's children apart)."""
    md = ["### Where leantune's step goes (bench --train --profile, measured steps, self time)", ""]
    for title, rows in profiles:
        if not rows:
            continue
        total = sum(r["self_ms"] for r in rows)
        md += [f"{title}:", "", "| op | calls | self ms | share | GFLOP/s |", "|---|---|---|---|---|"]
        md += [f"| {r['op']} | {r['calls']} | {r['self_ms']:.0f} | {r['share']} | {r['gflops']:.1f} |" for r in rows[:top]]
        rest = rows[top:]
        if rest:
            md.append(f"| {len(rest)} other ops | {sum(r['calls'] for r in rest)} | "
                      f"{sum(r['self_ms'] for r in rest):.0f} | {100 * sum(r['self_ms'] for r in rest) / total:.1f}% | |")
        md.append("")
    return md


def ratio(a, b, key):
    if not a or not b or key not in a or key not in b:
        return None
    return a[key] / b[key]


def fmt_ratio(r):
    return f"{r:.2f}x" if r else "-"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "build" / "bin" / "leantune"))
    ap.add_argument("--cache", default=str(ROOT / "build" / "bench-models"))
    ap.add_argument("--out", default=str(ROOT / "build" / "peers"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--quick", action="store_true",
                    help="2 threads only, 2 measured steps, no 1B model: about 10 minutes instead of an hour")
    ap.add_argument("--models", default=None,
                    help="training shapes, of smol,qwen,wide (default: smol,wide; --quick: smol)")
    ap.add_argument("--precisions", default="fp32,bf16", help="training precisions, of fp32,bf16")
    ap.add_argument("--methods", default="lora", help="of lora,qlora,full (qlora: an NF4 base through bitsandbytes; "
                    "full fine-tuning: every weight trained, AdamW)")
    ap.add_argument("--compiled", action="store_true", help="also PyTorch + PEFT under torch.compile (a second ratio)")
    ap.add_argument("--skip-train", action="store_true")
    ap.add_argument("--skip-infer", action="store_true")
    a = ap.parse_args()
    threads = [2] if a.quick else [int(x) for x in a.threads.split(",")]
    steps = 2 if a.quick else a.steps
    cache, out = pathlib.Path(a.cache), pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    smol = cache / "smollm2-135m-random"
    make_model(smol, SMOLLM2_135M)
    results = dict(train=[], infer=[])
    md = []
    if not a.skip_train:
        models = (a.models or ("smol" if a.quick else "smol,wide")).split(",")
        grid = []
        precs = [p for p in ("fp32", "bf16") if p in a.precisions.split(",")]
        methods = [m for m in ("lora", "qlora", "full") if m in a.methods.split(",")]
        if "smol" in models:
            grid += [("SmolLM2-135M", smol, t, meth, prec, ck, steps) for meth in methods for t in threads
                     for prec in precs for ck in ("none", "every")]
        if "qwen" in models:
            qwen = cache / "qwen2.5-0.5b-random"
            make_model(qwen, QWEN25_05B)
            grid += [("Qwen2.5-0.5B", qwen, t, meth, prec, ck, steps) for meth in methods for t in threads
                     for prec in precs for ck in ("none", "every")]
        if "wide" in models:
            wide = cache / "wide-1b-random"
            make_model(wide, WIDE_1B)
            grid += [("wide ~1B", wide, max(threads), "lora", "fp32", "every", 1)]
        tokenizer = aesop_tokenizer(cache)
        md += [f"### Training (LoRA r=16 all-linear, or full), micro-batch {a.batch} x {a.seq}, median step after a "
               "warm-up", "",
               "| model | method | threads | precision | checkpointing | leantune tok/s | PyTorch+PEFT tok/s | ratio | "
               "leantune peak RSS | PyTorch peak RSS | RSS ratio | leantune train tok/s (Aesop) | ratio |",
               "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        profiles = []
        for name, model, t, meth, prec, ck, st in grid:
            ours = leantune_train(a.bin, model, t, ck, a.batch, a.seq, st, prec, meth)
            pipe = leantune_train_pipeline(a.bin, model, tokenizer, t, ck, a.batch, a.seq, st, prec, meth)
            peer = torch_train(model, t, ck, a.batch, a.seq, st, prec, method=meth)
            results["train"].append(dict(model=name, method=meth, threads=t, precision=prec, checkpointing=ck,
                                         leantune=ours, leantune_train=pipe, pytorch=peer))
            profiles.append((f"{name}, {meth}, {t} threads, {prec}, checkpointing {ck}", ours.get("profile", [])))
            if a.compiled:
                comp = torch_train(model, t, ck, a.batch, a.seq, st, prec, compiled=True, method=meth)
                results["train"][-1]["pytorch_compiled"] = comp
                print(f"  torch.compile: {comp.get('tokens_per_s', comp.get('error'))} tok/s, leantune / compiled "
                      f"{fmt_ratio(ratio(ours, comp, 'tokens_per_s'))}", flush=True)
            g = lambda r, k, s=1: f"{r[k] / s:.0f}" if k in r else r.get("error", "-")[:40]
            md.append(f"| {name} | {meth} | {t} | {prec} | {ck} | {g(ours, 'tokens_per_s')} | "
                      f"{g(peer, 'tokens_per_s')} | "
                      f"{fmt_ratio(ratio(ours, peer, 'tokens_per_s'))} | {g(ours, 'peak_rss_bytes', 2**20)} MiB | "
                      f"{g(peer, 'peak_rss_bytes', 2**20)} MiB | {fmt_ratio(ratio(ours, peer, 'peak_rss_bytes'))} | "
                      f"{g(pipe, 'tokens_per_s')} | {fmt_ratio(ratio(pipe, peer, 'tokens_per_s'))} |")
            print(md[-1], flush=True)
        md += ["", "`leantune train` reads the Aesop corpus (packed rows, so attention stops at each fable's end, "
               "which the random-token rows of both engines do not) and counts every step, its warm-up included.", ""]
        md += profile_md(profiles)
    if not a.skip_infer:
        md += ["### Inference, SmolLM2-135M shape: prefill 128 tokens, decode 64 (median of 3 after a warm-up)", "",
               "| threads | llama.cpp weights | leantune weights | leantune prefill tok/s | llama.cpp prefill tok/s | "
               "ratio | leantune decode tok/s | llama.cpp decode tok/s | ratio |", "|---|---|---|---|---|---|---|---|---|"]
        for t in threads:
            mine = {"f32": leantune_infer(a.bin, smol, t, 128, 64, 3),
                    "int8": leantune_infer(a.bin, smol, t, 128, 64, 3, "int8")}
            for kind in ("f32", "f16", "q8_0"):
                ours_kind = "int8" if kind == "q8_0" else "f32"  # f16: we have no f16 inference path
                ours = mine[ours_kind]
                g = cache / f"smollm2-135m-random-{kind}.gguf"
                to_gguf(smol, g, kind)
                peer = llama_cpp_infer(g, t, 128, 64, 3)
                results["infer"].append(dict(threads=t, gguf=kind, leantune_weights=ours_kind, leantune=ours,
                                             llama_cpp=peer))
                f = lambda r, k: f"{r[k]:.1f}" if k in r else r.get("error", "-")[:40]
                md.append(f"| {t} | {kind} | {ours_kind} | {f(ours, 'prefill_tok_s')} | {f(peer, 'prefill_tok_s')} | "
                          f"{fmt_ratio(ratio(ours, peer, 'prefill_tok_s'))} | {f(ours, 'decode_tok_s')} | "
                          f"{f(peer, 'decode_tok_s')} | {fmt_ratio(ratio(ours, peer, 'decode_tok_s'))} |")
                print(md[-1], flush=True)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    (out / "results.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    print(f"\nwrote {out / 'results.md'} and {out / 'results.json'}")


if __name__ == "__main__":
    main()

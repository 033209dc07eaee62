# llama.cpp itself (through llama-cpp-python) running what `leantune export --gguf` writes, on a
# random model with SmolLM2-135M's attention layout (hidden 576, 9 query heads of 64 over 3 KV
# heads, MLP 1536, tied embeddings, RoPE theta 1e5; 4 layers instead of 30) and the vocabulary of a
# byte-level BPE trained like the other GGUF tests':
#   - greedy: 64 tokens of leantune reading the GGUF equal llama.cpp's on the same prompt ids, at f16
#     (leantune --weights f16: inputs rounded to f16 as ggml's f16 products do), and at q8_0 and q4_0
#     with --llama-cpp-numerics (kernels/llamacpp_numerics.h: llama.cpp's arithmetic op for op);
#   - with --llama-cpp-numerics, the logits themselves equal llama.cpp's bit for bit, for the prompt
#     and 48 single-token steps (the orders followed are those of ggml-cpu's AVX-512 build: skipped,
#     with the reason, where llama.cpp was built without AVX-512);
#   - the fast q8_0 / q4_0 kernels' logits along llama.cpp's greedy path, within 2% of their range;
#   - a PEFT adapter exported alone (`export --gguf --adapter`) and applied by llama.cpp at run time
#     (Llama(lora_path=...)) over the f32 base GGUF gives leantune's 32 greedy tokens with the PEFT
#     adapter merged (f32).
# Both sides take the prompt ids as given (no BOS added), keep the KV cache in f32 and ignore EOS.
# The weights are drawn wider than transformers' default (std 0.08) so the model is confident and the
# comparison is about the files, not about which side breaks a near tie; the test reports llama.cpp's
# top-2 margin where the tokens differ.
# Skipped (with the reason) where llama-cpp-python is not installed (bench/peers/run.sh installs it;
# it builds llama.cpp from source, so the CI's test dependencies leave it out).
import subprocess

import numpy as np
import pytest
import torch

llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (scripts/install-test-deps.sh "
                                                     "installs it); the llama.cpp parity tests need it")

from test_gguf_export import byte_level_tokenizer  # noqa: E402

PROMPT = 12


def plain_llama(**kw):
    """llama_cpp.Llama without llama.cpp's extra buffer types (AMX / repacked weights): its plain
    CPU kernels, the same on every machine. Its AMX int8 path segfaulted on q8_0 / q4_0 GGUFs on a
    Sapphire Rapids VM (llama-cpp-python 0.3.36), taking the whole pytest run down."""
    default = llama_cpp.llama_cpp.llama_model_default_params

    def params():
        p = default()
        if hasattr(p, "use_extra_bufts"):
            p.use_extra_bufts = False
        return p

    llama_cpp.llama_cpp.llama_model_default_params = params
    try:
        return llama_cpp.Llama(**kw)
    finally:
        llama_cpp.llama_cpp.llama_model_default_params = default


def smollm2_shaped(folder, seed=0, layers=4):
    from transformers import LlamaConfig, LlamaForCausalLM
    folder.mkdir(parents=True, exist_ok=True)
    V = byte_level_tokenizer(folder, 400).get_vocab_size()
    c = LlamaConfig(hidden_size=576, intermediate_size=1536, num_hidden_layers=layers, num_attention_heads=9,
                    num_key_value_heads=3, vocab_size=V, max_position_embeddings=2048, rms_norm_eps=1e-5,
                    rope_theta=100000.0, tie_word_embeddings=True, initializer_range=0.08, bos_token_id=0,
                    eos_token_id=0)
    torch.manual_seed(seed)
    m = LlamaForCausalLM(c).eval()
    with torch.no_grad():  # norms away from 1 too, so a wrong norm key or epsilon would show
        for n, p in m.named_parameters():
            if n.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    m.save_pretrained(folder, safe_serialization=True)
    return m


def export(leantune_bin, out, *args):
    r = subprocess.run([leantune_bin, "export", "--gguf", str(out), *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def ours(leantune_bin, model, prompt, n, tmp_path, *extra):
    ids_out = tmp_path / "ids.txt"
    r = subprocess.run([leantune_bin, "generate", "--model", str(model), "--prompt-ids", ",".join(map(str, prompt)),
                        "-n", str(n), "--temperature", "0", "--ignore-eos", "--threads", "2", "-q",
                        "--ids-out", str(ids_out), *extra], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return [int(t) for t in ids_out.read_text().replace("\n", ",").split(",") if t.strip()]


def llama_cpp_greedy(path, prompt, n, lora=None):
    """Greedy tokens of llama.cpp: the argmax of each step's logits (f32 KV cache, 2 threads)."""
    kw = dict(model_path=str(path), n_ctx=256, n_batch=256, n_threads=2, n_threads_batch=2, logits_all=True,
              verbose=False, seed=0, type_k=0, type_v=0)  # ggml type 0: f32 keys and values
    if lora:
        kw["lora_path"] = str(lora)
    llm = plain_llama(**kw)
    llm.eval(list(prompt))
    out, margins = [], []
    for _ in range(n):
        logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        top2 = np.sort(logits)[-2:]
        out.append(int(np.argmax(logits)))
        margins.append(float(top2[1] - top2[0]))
        llm.eval([out[-1]])
    return out, margins


def llama_cpp_has_avx512():
    return "AVX512 = 1" in llama_cpp.llama_print_system_info().decode()


def greedy_steps(llm, n):
    """After the prompt's eval: n rows of llama.cpp's logits, each step feeding its argmax alone."""
    ref, seq = [], []
    for _ in range(n):
        ref.append(np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32))
        seq.append(int(np.argmax(ref[-1])))
        llm.eval([seq[-1]])
    return ref, seq


def check_same(got, want, margins, what):
    if got != want:
        i = next(k for k in range(min(len(got), len(want))) if got[k] != want[k]) if got[:len(want)] != want[:len(got)] \
            else min(len(got), len(want))
        pytest.fail(f"{what}: leantune {got} vs llama.cpp {want}; first difference at token {i} "
                    f"(llama.cpp's top-2 logit margin there {margins[i] if i < len(margins) else float('nan'):.4g})")


@pytest.mark.parametrize("typ", ["f16", "q8_0", "q4_0"])
def test_greedy_tokens_equal_llama_cpp(leantune_bin, tmp_path, typ):
    model = smollm2_shaped(tmp_path / "src")
    export(leantune_bin, tmp_path / "m.gguf", "--type", typ, "--model", str(tmp_path / "src"))
    prompt = np.random.default_rng(1).integers(1, model.config.vocab_size, size=PROMPT).tolist()
    want, margins = llama_cpp_greedy(tmp_path / "m.gguf", prompt, 64)
    if typ != "f16" and not llama_cpp_has_avx512():
        pytest.skip("--llama-cpp-numerics follows ggml-cpu's AVX-512 build; this llama.cpp was built without AVX-512")
    exact = ["--llama-cpp-numerics"] if typ != "f16" else []
    got = ours(leantune_bin, tmp_path / "m.gguf", prompt, 64, tmp_path, "--weights", typ, *exact)
    check_same(got, want, margins, typ)
    assert len(set(want)) > 3, want  # not one token repeated: the comparison means something


@pytest.mark.parametrize("typ", ["q8_0", "q4_0"])
def test_numerics_logits_are_llama_cpps_bit_for_bit(leantune_bin, tmp_path, typ):
    if not llama_cpp_has_avx512():
        pytest.skip("--llama-cpp-numerics follows ggml-cpu's AVX-512 build; this llama.cpp was built without AVX-512")
    model = smollm2_shaped(tmp_path / "src")
    export(leantune_bin, tmp_path / "m.gguf", "--type", typ, "--model", str(tmp_path / "src"))
    V = model.config.vocab_size
    prompt = np.random.default_rng(2).integers(1, V, size=PROMPT).tolist()
    llm = plain_llama(model_path=str(tmp_path / "m.gguf"), n_ctx=256, n_batch=256, n_threads=2, n_threads_batch=2,
                      logits_all=True, verbose=False, seed=0, type_k=0, type_v=0)
    llm.eval(prompt)  # one batch, then one token at a time: the rows leantune's prefill and steps give
    ref, seq = greedy_steps(llm, 49)
    out = tmp_path / "logits.f32"
    r = subprocess.run([leantune_bin, "logits", "--model", str(tmp_path / "m.gguf"),
                        "--ids", ",".join(map(str, prompt)), "--decode", ",".join(map(str, seq[:-1])),
                        "--out", str(out), "--threads", "2", "--weights", typ, "--llama-cpp-numerics"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got = np.fromfile(out, dtype=np.float32).reshape(-1, V)
    want = np.array(ref)
    assert got.shape == want.shape
    rows = [i for i in range(len(got)) if got[i].tobytes() != want[i].tobytes()]
    assert not rows, f"{typ}: rows {rows} differ (max |diff| {np.abs(got - want).max():.3g})"


def test_numerics_follow_llama_cpps_batches(leantune_bin, tmp_path):
    # a prompt one token longer than llama.cpp's default batch (512): llama.cpp runs 512 tokens, then
    # one alone (whose attention sums in the single-token order); leantune's default prefill block
    # with --llama-cpp-numerics is the same 512, so the last prompt row and the steps after it agree
    if not llama_cpp_has_avx512():
        pytest.skip("--llama-cpp-numerics follows ggml-cpu's AVX-512 build; this llama.cpp was built without AVX-512")
    model = smollm2_shaped(tmp_path / "src", layers=2)
    export(leantune_bin, tmp_path / "m.gguf", "--type", "q8_0", "--model", str(tmp_path / "src"))
    V = model.config.vocab_size
    prompt = np.random.default_rng(3).integers(1, V, size=513).tolist()
    llm = plain_llama(model_path=str(tmp_path / "m.gguf"), n_ctx=1024, n_threads=2, n_threads_batch=2,
                      logits_all=True, verbose=False, seed=0, type_k=0, type_v=0)  # n_batch: its default, 512
    llm.eval(prompt)
    ref, seq = greedy_steps(llm, 4)
    out = tmp_path / "logits.f32"
    r = subprocess.run([leantune_bin, "logits", "--model", str(tmp_path / "m.gguf"), "--context", "1024",
                        "--ids", ",".join(map(str, prompt)), "--decode", ",".join(map(str, seq[:-1])),
                        "--out", str(out), "--threads", "2", "--weights", "q8_0", "--llama-cpp-numerics"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got = np.fromfile(out, dtype=np.float32).reshape(-1, V)
    assert got.tobytes() == np.array(ref).tobytes(), f"max |diff| {np.abs(got - np.array(ref)).max():.3g}"


@pytest.mark.parametrize("typ", ["q8_0", "q4_0"])
def test_block_logits_follow_llama_cpp(leantune_bin, tmp_path, typ):
    # teacher-forced along llama.cpp's greedy tokens: leantune's q8_0 / q4_0 product (inputs quantized
    # to q8_0 per block, as llama.cpp's) gives llama.cpp's logits within 2% of their range, and at
    # least 3x closer than the same weights with f32 inputs (--weights f32: the GGUF decoded), which
    # shows the product is llama.cpp's and not merely the weights
    model = smollm2_shaped(tmp_path / "src")
    export(leantune_bin, tmp_path / "m.gguf", "--type", typ, "--model", str(tmp_path / "src"))
    V = model.config.vocab_size
    prompt = np.random.default_rng(1).integers(1, V, size=PROMPT).tolist()
    seq, _ = llama_cpp_greedy(tmp_path / "m.gguf", prompt, 16)
    llm = plain_llama(model_path=str(tmp_path / "m.gguf"), n_ctx=256, n_batch=256, n_threads=2, n_threads_batch=2,
                      logits_all=True, verbose=False, seed=0, type_k=0, type_v=0)
    llm.eval(prompt + seq[:-1])
    ref = np.array(llm.scores[PROMPT - 1:PROMPT + len(seq) - 1], dtype=np.float32)
    out = tmp_path / "logits.f32"

    def ours_logits(*extra):
        r = subprocess.run([leantune_bin, "logits", "--model", str(tmp_path / "m.gguf"), "--ids", ",".join(map(str, prompt)),
                            "--decode", ",".join(map(str, seq[:-1])), "--out", str(out), "--threads", "2", *extra],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return np.fromfile(out, dtype=np.float32).reshape(-1, V)
    q8, f32_inputs = np.abs(ours_logits("--weights", typ) - ref).max(), np.abs(ours_logits() - ref).max()
    span = ref.max() - ref.min()
    print(f"{typ} vs llama.cpp: max |logit diff| {q8:.4f} (f32 inputs: {f32_inputs:.4f}), logit range {span:.2f}")
    assert q8 < 0.02 * span
    assert 3 * q8 < f32_inputs


def test_lora_adapter_gguf_in_llama_cpp(leantune_bin, tmp_path):
    from peft import LoraConfig, get_peft_model
    model = smollm2_shaped(tmp_path / "base", seed=2)
    torch.manual_seed(3)
    mods = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    pm = get_peft_model(model, LoraConfig(r=8, lora_alpha=24, target_modules=mods, init_lora_weights=False))
    with torch.no_grad():  # B big enough to change the greedy tokens (PEFT's random init is small)
        for n, p in pm.named_parameters():
            if "lora_B" in n:
                p.normal_(0.0, 0.05)
    pm.save_pretrained(tmp_path / "adapter")
    export(leantune_bin, tmp_path / "base.gguf", "--type", "f32", "--model", str(tmp_path / "base"))
    export(leantune_bin, tmp_path / "a.gguf", "--adapter", str(tmp_path / "adapter"), "--base", str(tmp_path / "base"))
    prompt = np.random.default_rng(4).integers(1, model.config.vocab_size, size=PROMPT).tolist()
    want, margins = llama_cpp_greedy(tmp_path / "base.gguf", prompt, 32, lora=tmp_path / "a.gguf")
    got = ours(leantune_bin, tmp_path / "base", prompt, 32, tmp_path, "--adapter", str(tmp_path / "adapter"))
    check_same(got, want, margins, "f32 + LoRA adapter")
    base, _ = llama_cpp_greedy(tmp_path / "base.gguf", prompt, 32)
    assert base != want  # the adapter is really applied

# `--llama-cpp-numerics` (kernels/llamacpp_numerics.h: llama.cpp's arithmetic op for op) without
# llama.cpp itself (test_llamacpp_parity.py checks it bit for bit against llama-cpp-python where that
# is installed): on a random SmolLM2-shaped model exported to q8_0 / q4_0 GGUFs, its logits over a
# prefill and single-token steps stay within 2% of the logit range of the fast q8_0 / q4_0 kernels'
# (the bound test_block_logits_follow_llama_cpp holds the fast kernels to against llama.cpp: the two
# differ in summation order, roundings and exp, which flips some 8-bit input codes); they are the same
# bytes with 1 and 2 threads; and the settings it does not cover are refused with a clear error.
import subprocess

import numpy as np
import pytest
import torch

from test_gguf_export import byte_level_tokenizer, export


def small_model(folder, layers=2):
    from transformers import LlamaConfig, LlamaForCausalLM
    folder.mkdir(parents=True, exist_ok=True)
    V = byte_level_tokenizer(folder, 400).get_vocab_size()
    c = LlamaConfig(hidden_size=576, intermediate_size=1536, num_hidden_layers=layers, num_attention_heads=9,
                    num_key_value_heads=3, vocab_size=V, max_position_embeddings=2048, rms_norm_eps=1e-5,
                    rope_theta=100000.0, tie_word_embeddings=True, initializer_range=0.08)
    torch.manual_seed(0)
    LlamaForCausalLM(c).eval().save_pretrained(folder, safe_serialization=True)
    return V


def logits(leantune_bin, model, out, V, *extra):
    prompt, decode = "5,17,99,3,250,41,7", "12,300,8,77,190"
    r = subprocess.run([leantune_bin, "logits", "--model", str(model), "--ids", prompt, "--decode", decode, "--out",
                        str(out), *extra], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return np.fromfile(out, dtype=np.float32).reshape(-1, V)


@pytest.mark.parametrize("typ", ["q8_0", "q4_0"])
def test_numerics_follow_the_fast_kernels(leantune_bin, tmp_path, typ):
    V = small_model(tmp_path / "src")
    export(leantune_bin, tmp_path / "src", tmp_path / "m.gguf", typ)
    out = tmp_path / "l.f32"
    m = tmp_path / "m.gguf"
    fast = logits(leantune_bin, m, out, V, "--weights", typ, "--threads", "2")
    exact2 = logits(leantune_bin, m, out, V, "--weights", typ, "--threads", "2", "--llama-cpp-numerics")
    exact1 = logits(leantune_bin, m, out, V, "--weights", typ, "--threads", "1", "--llama-cpp-numerics")
    assert fast.shape == (6, V)
    span = fast.max() - fast.min()
    diff = np.abs(exact2 - fast).max()
    print(f"{typ}: llama.cpp numerics vs fast kernels: max |diff| {diff:.4f} of a range {span:.2f}")
    assert diff < 0.02 * span
    assert exact1.tobytes() == exact2.tobytes()  # nothing in llama.cpp's orders depends on the thread count


def test_numerics_refuse_what_they_do_not_cover(leantune_bin, tmp_path):
    V = small_model(tmp_path / "src", layers=1)
    export(leantune_bin, tmp_path / "src", tmp_path / "m.gguf", "q8_0")

    def err(*args):
        r = subprocess.run([leantune_bin, *args], capture_output=True, text=True)
        assert r.returncode == 1, (args, r.returncode, r.stderr)
        return r.stderr

    base = ["generate", "--model", str(tmp_path / "m.gguf"), "--prompt-ids", "1,2,3", "-n", "2", "--llama-cpp-numerics"]
    assert "--weights q8_0 | q4_0" in err(*base)
    assert "--weights q8_0 | q4_0" in err(*base, "--weights", "f16")
    assert "f32 KV cache" in err(*base, "--weights", "q8_0", "--kv-cache", "bf16")
    # llama.cpp multiplies the types the GGUF stores: q4_0 numerics on q8_0 tensors are refused
    msg = err(*base, "--weights", "q4_0")
    assert "blk.0.attn_q.weight" in msg and "stored as q8_0" in msg
    assert "--num-beams" in err(*base, "--weights", "q8_0", "--num-beams", "2")
    # another architecture (Qwen2: another RoPE layout in llama.cpp) is refused, naming it
    from transformers import Qwen2Config, Qwen2ForCausalLM
    qwen = tmp_path / "qwen"
    qwen.mkdir()
    byte_level_tokenizer(qwen, 300)
    Qwen2ForCausalLM(Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=1,
                                 num_key_value_heads=1, vocab_size=V, max_position_embeddings=256)).save_pretrained(qwen)
    msg = err("generate", "--model", str(qwen), "--prompt-ids", "1,2", "-n", "1", "--weights", "q8_0",
              "--llama-cpp-numerics")
    assert "qwen2" in msg and "without them" in msg
    assert "give one" in err(*base, "--weights", "q8_0", "--reference")
    assert "give one" in err("logits", "--model", str(tmp_path / "m.gguf"), "--ids", "1,2",
                             "--out", str(tmp_path / "o"), "--reference", "--llama-cpp-numerics")
    assert not (tmp_path / "o").exists()

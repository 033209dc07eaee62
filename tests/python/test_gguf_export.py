# `leantune export --gguf`: tiny random HF models (Llama 3 rope scaling + GQA, Qwen2 q/k/v biases,
# tied SmolLM2-like) and stories260K (llama2.c) at every type, read back with the `gguf` package
# (llama.cpp's own Python reader): metadata, tokenizer, tensor names / shapes / types, q/k rows
# permuted as convert_hf_to_gguf.py does, and values (f32 exact, f16 / bf16 the exact rounding,
# q8_0 / q4_0 the same bytes as gguf's reference quantizer and within half a quantization step),
# a merged PEFT adapter, and a PEFT adapter written alone as a llama.cpp LoRA adapter GGUF.
# Not checked here: llama.cpp itself loading the file (no prebuilt llama-cpp-python wheel).
import json
import struct
import subprocess

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as QT
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from test_model_parity import build

TYPES = {"f32": QT.F32, "f16": QT.F16, "bf16": QT.BF16, "q8_0": QT.Q8_0, "q4_0": QT.Q4_0}
FTYPE = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 7, "bf16": 32}
LINEARS = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
           "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}
TEXT = ["The quick brown fox jumps over the lazy dog. " * 3, "Once upon a time there was a little cat.",
        "Numbers 12345 and symbols !?; end."]


def byte_level_tokenizer(folder, vocab_size, extra=0):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(TEXT, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"] + [f"<x{i}>" for i in range(extra)],
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text('{"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}')
    return tok


def export(leantune_bin, model, out, typ, *extra):
    model_flag = ["--model", str(model)] if model else []
    r = subprocess.run([leantune_bin, "export", "--gguf", str(out), "--type", typ, *model_flag, *extra],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return gguf.GGUFReader(str(out))


def field(reader, key):
    f = reader.fields[key]
    if f.types[0] == gguf.GGUFValueType.ARRAY:
        if f.types[-1] == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode("utf-8") for i in f.data]
        return [f.parts[i][0].item() for i in f.data]
    if f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode("utf-8")
    return f.parts[f.data[0]][0].item()


def permute(w, n_head):
    # convert_hf_to_gguf.py LlamaModel.permute: per head, HF's rotate-halves rows to interleaved pairs
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def expected_type(typ, shape):
    if len(shape) == 1:
        return QT.F32  # norms, biases, rope factors stay f32
    if typ in ("q8_0", "q4_0") and shape[-1] % 32:
        return QT.F16  # rows that 32-blocks do not divide fall back to f16, as convert_hf_to_gguf does
    return TYPES[typ]


def check_values(t, ref, typ):
    """t: a GGUF tensor; ref: the f32 values it should hold (numpy, HF shape)."""
    got = gguf.quants.dequantize(t.data, t.tensor_type).reshape(ref.shape)
    if t.tensor_type == QT.F32:
        np.testing.assert_array_equal(got, ref)
    elif t.tensor_type == QT.F16:
        np.testing.assert_array_equal(got, ref.astype(np.float16).astype(np.float32))  # round to nearest even
    elif t.tensor_type == QT.BF16:
        np.testing.assert_array_equal(got, torch.tensor(ref).to(torch.bfloat16).float().numpy())
    else:
        # the same bytes as gguf's numpy port of ggml's reference quantizer ...
        np.testing.assert_array_equal(np.asarray(t.data).reshape(-1),
                                      gguf.quants.quantize(ref, t.tensor_type).reshape(-1))
        # ... and within the format's bound per 32-block. q8_0: d = amax/127, q = round(x/d), so
        # |x - q·d| <= d/2, plus |q|·|d - f16(d)| <= 127·d·2^-11 from storing d as f16. q4_0: step
        # |d| = amax/8; the extreme maps exactly, everything else rounds to within |d|/2 except
        # values near -extreme, clamped from code 8 to 7: at most |d|, plus 8·|d|·2^-11.
        x, y = ref.reshape(-1, 32), got.reshape(-1, 32)
        amax = np.abs(x).max(axis=1, keepdims=True)
        bound = amax / 127 * (0.5 + 127 / 2048) if t.tensor_type == QT.Q8_0 else amax / 8 * (1 + 8 / 2048)
        assert (np.abs(x - y) <= bound + 1e-7).all()
        assert np.abs(y).max() > 0


def check_hparams(r, typ, V, C, L, F, NH, NKV, HS, eps, theta, ctx):
    assert field(r, "general.architecture") == "llama"
    assert field(r, "general.file_type") == FTYPE[typ]
    for k, v in {"context_length": ctx, "embedding_length": C, "block_count": L, "feed_forward_length": F,
                 "rope.dimension_count": HS, "attention.head_count": NH, "attention.head_count_kv": NKV,
                 "vocab_size": V}.items():
        assert field(r, "llama." + k) == v, k
    assert field(r, "llama.attention.layer_norm_rms_epsilon") == pytest.approx(eps, rel=1e-7)
    assert field(r, "llama.rope.freq_base") == pytest.approx(theta, rel=1e-7)


def rope_params(folder):
    # (theta, scaling dict or None) from config.json, in either the transformers v5 layout
    # (rope_parameters) or the older one (rope_theta + rope_scaling)
    cfg = json.loads((folder / "config.json").read_text())
    rp = cfg.get("rope_parameters") or dict(cfg.get("rope_scaling") or {}, rope_theta=cfg.get("rope_theta", 1e4))
    return rp["rope_theta"], (rp if rp.get("rope_type", rp.get("type")) == "llama3" else None)


def llama3_rope_factors(theta, s, hs):
    # convert_hf_to_gguf.py's LlamaModel rope_freqs for rope_type llama3
    freqs = 1.0 / (theta ** (np.arange(0, hs, 2, dtype=np.float64) / hs))
    lo, hi = s["original_max_position_embeddings"] / s["low_freq_factor"], \
        s["original_max_position_embeddings"] / s["high_freq_factor"]
    out = []
    for f in freqs:
        wl = 2 * np.pi / f
        if wl < hi:
            out.append(1.0)
        elif wl > lo:
            out.append(s["factor"])
        else:
            sm = (s["original_max_position_embeddings"] / wl - s["low_freq_factor"]) / \
                (s["high_freq_factor"] - s["low_freq_factor"])
            out.append(1 / ((1 - sm) / s["factor"] + sm))
    return np.array(out, dtype=np.float32)


@pytest.mark.parametrize("typ", list(TYPES))
@pytest.mark.parametrize("kind", ["llama3", "qwen2", "smollm2"])
def test_hf_model_export(leantune_bin, tmp_path, kind, typ):
    model = build(kind)
    c = model.config
    folder = tmp_path / kind
    model.save_pretrained(folder, safe_serialization=True)
    tok = byte_level_tokenizer(folder, 280)
    r = export(leantune_bin, folder, tmp_path / "m.gguf", typ)
    HS = c.hidden_size // c.num_attention_heads
    theta, scaling = rope_params(folder)
    check_hparams(r, typ, c.vocab_size, c.hidden_size, c.num_hidden_layers, c.intermediate_size,
                  c.num_attention_heads, c.num_key_value_heads, HS, c.rms_norm_eps, theta,
                  c.max_position_embeddings)
    # tokenizer: byte-level BPE as gpt2, the vocabulary padded to the embedding rows
    assert field(r, "tokenizer.ggml.model") == "gpt2"
    tokens, types = field(r, "tokenizer.ggml.tokens"), field(r, "tokenizer.ggml.token_type")
    vocab = {i: s for s, i in tok.get_vocab().items()}
    assert len(tokens) == len(types) == c.vocab_size
    assert tokens[:len(vocab)] == [vocab[i] for i in range(len(vocab))]
    assert tokens[len(vocab):] == [f"[PAD{i}]" for i in range(len(vocab), c.vocab_size)]
    assert types[0] == 3 and set(types[1:len(vocab)]) == {1} and set(types[len(vocab):]) == {5}
    assert field(r, "tokenizer.ggml.merges") == [" ".join(m) if isinstance(m, list) else m
                                                for m in json.loads(tok.to_str())["model"]["merges"]]
    assert field(r, "tokenizer.ggml.bos_token_id") == 0 and field(r, "tokenizer.ggml.eos_token_id") == 0
    assert field(r, "tokenizer.ggml.pre") == "gpt-2"
    # tensors: names, shapes (GGUF lists dims innermost first), types, values
    sd = {k: v.float().numpy() for k, v in model.state_dict().items() if "rotary" not in k}
    want = {"token_embd.weight": sd["model.embed_tokens.weight"], "output_norm.weight": sd["model.norm.weight"]}
    if not c.tie_word_embeddings:
        want["output.weight"] = sd["lm_head.weight"]
    for l in range(c.num_hidden_layers):
        p = f"model.layers.{l}."
        want[f"blk.{l}.attn_norm.weight"] = sd[p + "input_layernorm.weight"]
        want[f"blk.{l}.ffn_norm.weight"] = sd[p + "post_attention_layernorm.weight"]
        for hf, gg in LINEARS.items():
            for what in ("weight", "bias"):
                key = p + ("mlp." if hf in ("gate_proj", "up_proj", "down_proj") else "self_attn.") + hf + "." + what
                if key in sd:
                    heads = {"q_proj": c.num_attention_heads, "k_proj": c.num_key_value_heads}.get(hf)
                    want[f"blk.{l}.{gg}.{what}"] = permute(sd[key], heads) if heads else sd[key]
    if scaling:
        want["rope_freqs.weight"] = llama3_rope_factors(theta, scaling, HS)
    got = {t.name: t for t in r.tensors}
    assert set(got) == set(want)
    assert kind != "qwen2" or "blk.0.attn_q.bias" in got
    for name, ref in want.items():
        t = got[name]
        assert list(t.shape) == list(reversed(ref.shape)), name
        assert t.tensor_type == expected_type(typ, ref.shape), name
        if name == "rope_freqs.weight":
            np.testing.assert_allclose(gguf.quants.dequantize(t.data, t.tensor_type), ref, rtol=1e-5)
        else:
            check_values(t, np.ascontiguousarray(ref, dtype=np.float32), typ)


def spm_style_tokenizer(folder):
    # A SentencePiece-style BPE tokenizer.json (byte fallback, "▁" for spaces), as Llama 2's: written
    # by hand so that its merges, and so the scores GGUF needs, are known.
    vocab = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)] + \
        ["\u2581", "a", "b", "c", "\u2581a", "ab", "\u2581ab"]
    bos = [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]
    tj = {
        "version": "1.0",
        "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i, t in enumerate(vocab[:3])],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"}, {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
        "pre_tokenizer": None,
        "post_processor": {"type": "TemplateProcessing", "single": bos,
                           "pair": bos + [{"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(vocab)}, "merges": ["\u2581 a", "a b", "\u2581a b"]},
    }
    (folder / "tokenizer.json").write_text(json.dumps(tj))
    return vocab


def test_spm_style_tokenizer_json(leantune_bin, tmp_path):
    model = build("smollm2")
    folder = tmp_path / "m"
    model.save_pretrained(folder, safe_serialization=True)
    vocab = spm_style_tokenizer(folder)
    r = export(leantune_bin, folder, tmp_path / "m.gguf", "f16")
    assert field(r, "tokenizer.ggml.model") == "llama"
    assert "tokenizer.ggml.merges" not in r.fields
    V, n = model.config.vocab_size, len(vocab)
    tokens, types = field(r, "tokenizer.ggml.tokens"), field(r, "tokenizer.ggml.token_type")
    scores = field(r, "tokenizer.ggml.scores")
    assert tokens[:n] == vocab and len(tokens) == V
    assert types[:3] == [2, 3, 3] and set(types[3:259]) == {6} and set(types[259:n]) == {1} and set(types[n:]) == {5}
    # llama.cpp's SPM tokenizer merges the best-scoring pair first: the merge of rank k scores -(k + 1)
    assert scores[n - 3:n] == [-1.0, -2.0, -3.0] and set(scores[:n - 3]) == {0.0}
    assert field(r, "tokenizer.ggml.unknown_token_id") == 0 and field(r, "tokenizer.ggml.bos_token_id") == 1
    assert field(r, "tokenizer.ggml.add_bos_token") is True


def read_llama2c(path):
    # llama2.c checkpoint: 7 int32 (dim, hidden, layers, heads, kv heads, vocab (<0: untied), seq), then f32 tensors
    raw = path.read_bytes()
    C, F, L, NH, NKV, V, S = struct.unpack("7i", raw[:28])
    x = np.frombuffer(raw, dtype=np.float32, offset=28)
    HS, KV = C // NH, C // NH * NKV
    out, o = {}, 0
    for name, shape in [("embed", (abs(V), C)), ("att_norm", (L, C)), ("wq", (L, C, C)), ("wk", (L, KV, C)),
                        ("wv", (L, KV, C)), ("wo", (L, C, C)), ("ffn_norm", (L, C)), ("w1", (L, F, C)),
                        ("w2", (L, C, F)), ("w3", (L, F, C)), ("norm", (C,))]:
        n = int(np.prod(shape))
        out[name], o = x[o:o + n].reshape(shape), o + n
    return (C, F, L, NH, NKV, abs(V), S, HS), out


@pytest.mark.parametrize("typ", list(TYPES))
def test_stories260k_export(leantune_bin, shared_dir, tmp_path, typ):
    d = shared_dir / "models" / "stories260K"
    r = export(leantune_bin, d / "stories260K.bin", tmp_path / "s.gguf", typ, "--tokenizer", str(d / "tok512.bin"))
    (C, F, L, NH, NKV, V, S, HS), w = read_llama2c(d / "stories260K.bin")
    check_hparams(r, typ, V, C, L, F, NH, NKV, HS, 1e-5, 10000.0, S)
    # SentencePiece vocabulary: "▁" restored for spaces, BOS/EOS without llama2.c's newlines
    assert field(r, "tokenizer.ggml.model") == "llama"
    tokens, scores = field(r, "tokenizer.ggml.tokens"), field(r, "tokenizer.ggml.scores")
    types = field(r, "tokenizer.ggml.token_type")
    assert tokens[:3] == ["<unk>", "<s>", "</s>"] and types[:3] == [2, 3, 3]
    assert tokens[3] == "<0x00>" and types[3] == 6 and types[3 + 255] == 6
    assert len(tokens) == V and any(t.startswith("\u2581") for t in tokens) and not any(" " in t for t in tokens)
    raw, p, ref_scores = (d / "tok512.bin").read_bytes(), 4, []
    while p < len(raw):
        s, n = struct.unpack_from("fi", raw, p)
        ref_scores.append(s)
        p += 8 + n
    np.testing.assert_array_equal(np.array(scores, np.float32), np.array(ref_scores, np.float32))
    assert field(r, "tokenizer.ggml.bos_token_id") == 1 and field(r, "tokenizer.ggml.eos_token_id") == 2
    assert field(r, "tokenizer.ggml.add_bos_token") is True
    # llama2.c weights are already in llama.cpp's interleaved rotary layout: q/k are NOT permuted
    got = {t.name: t for t in r.tensors}
    assert "output.weight" not in got  # stories260K shares its classifier with the embedding
    want = {"token_embd.weight": w["embed"], "output_norm.weight": w["norm"]}
    for l in range(L):
        for gg, k in [("attn_norm", "att_norm"), ("ffn_norm", "ffn_norm"), ("attn_q", "wq"), ("attn_k", "wk"),
                      ("attn_v", "wv"), ("attn_output", "wo"), ("ffn_gate", "w1"), ("ffn_down", "w2"),
                      ("ffn_up", "w3")]:
            want[f"blk.{l}.{gg}.weight"] = w[k][l]
    assert set(got) == set(want)
    for name, ref in want.items():
        assert list(got[name].shape) == list(reversed(ref.shape)), name
        assert got[name].tensor_type == expected_type(typ, ref.shape), name
        check_values(got[name], np.ascontiguousarray(ref), typ)


def test_adapter_is_merged(leantune_bin, tmp_path):
    from peft import LoraConfig, get_peft_model
    model = build("smollm2")
    folder = tmp_path / "base"
    model.save_pretrained(folder, safe_serialization=True)
    byte_level_tokenizer(folder, 280)
    base_q = model.state_dict()["model.layers.0.self_attn.q_proj.weight"].numpy().copy()
    pm = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "down_proj"],
                                          init_lora_weights=False))
    pm.save_pretrained(tmp_path / "adapter")
    merged = pm.merge_and_unload().state_dict()
    r = export(leantune_bin, folder, tmp_path / "m.gguf", "f32", "--adapter", str(tmp_path / "adapter"))
    got = {t.name: t for t in r.tensors}
    nh = model.config.num_attention_heads
    for l in range(model.config.num_hidden_layers):
        q = merged[f"model.layers.{l}.self_attn.q_proj.weight"].numpy()
        down = merged[f"model.layers.{l}.mlp.down_proj.weight"].numpy()
        # f32 B·A summed in a different order than PEFT's: a few ulps of |W| ~ 0.3
        np.testing.assert_allclose(np.asarray(got[f"blk.{l}.attn_q.weight"].data), permute(q, nh), atol=1e-6)
        np.testing.assert_allclose(np.asarray(got[f"blk.{l}.ffn_down.weight"].data), down, atol=1e-6)
    # the adapter changed the weights (so the comparison above could not pass on the base model)
    assert np.abs(merged["model.layers.0.self_attn.q_proj.weight"].numpy() - base_q).max() > 1e-3


@pytest.mark.parametrize("kind", ["smollm2", "qwen2"])
def test_lora_adapter_gguf(leantune_bin, tmp_path, kind):
    # --adapter alone: llama.cpp's LoRA adapter GGUF. llama.cpp adds (alpha / r)·lora_b·lora_a to
    # the (permuted) base weight, so lora_a must be PEFT's A, lora_b its B with the q/k rows
    # permuted like the base, and alpha / r PEFT's scaling.
    from peft import LoraConfig, get_peft_model
    model = build(kind)
    folder = tmp_path / "base"
    model.save_pretrained(folder, safe_serialization=True)
    mods = ["q_proj", "k_proj", "v_proj", "down_proj"]
    pm = get_peft_model(model, LoraConfig(r=4, lora_alpha=12, target_modules=mods, init_lora_weights=False,
                                          use_rslora=(kind == "qwen2")))
    pm.save_pretrained(tmp_path / "adapter")
    r = export(leantune_bin, "", tmp_path / "a.gguf", "f32", "--adapter", str(tmp_path / "adapter"),
               "--base", str(folder))
    assert field(r, "general.architecture") == "llama" and field(r, "general.type") == "adapter"
    assert field(r, "adapter.type") == "lora"
    scaling = 12 / 2 if kind == "qwen2" else 12 / 4  # rsLoRA: alpha / sqrt(r)
    assert field(r, "adapter.lora.alpha") / 4 == pytest.approx(scaling, rel=1e-6)
    got = {t.name: t for t in r.tensors}
    c = model.config
    sd = {k: v.detach().numpy() for k, v in pm.state_dict().items()}
    want = {}
    for l in range(c.num_hidden_layers):
        for hf in mods:
            key = f"base_model.model.model.layers.{l}.{'mlp' if hf == 'down_proj' else 'self_attn'}.{hf}"
            a, b = sd[key + ".lora_A.default.weight"], sd[key + ".lora_B.default.weight"]
            heads = {"q_proj": c.num_attention_heads, "k_proj": c.num_key_value_heads}.get(hf)
            want[f"blk.{l}.{LINEARS[hf]}.weight.lora_a"] = a
            want[f"blk.{l}.{LINEARS[hf]}.weight.lora_b"] = permute(b, heads) if heads else b
    assert set(got) == set(want)
    for name, ref in want.items():
        assert list(got[name].shape) == list(reversed(ref.shape)), name
        np.testing.assert_array_equal(np.asarray(got[name].data), ref)
    # without --base the adapter's base_model_name_or_path must be a local path
    e = run_err(leantune_bin, "--gguf", str(tmp_path / "b.gguf"), "--adapter", str(tmp_path / "adapter"))
    assert "--base" in e


def run_err(leantune_bin, *args):
    r = subprocess.run([leantune_bin, "export", *args], capture_output=True, text=True)
    assert r.returncode == 1, (r.returncode, r.stderr)
    return r.stderr


def test_export_errors(leantune_bin, shared_dir, tmp_path):
    d = shared_dir / "models" / "stories260K"
    out = str(tmp_path / "x.gguf")
    e = run_err(leantune_bin, "--gguf", out, "--type", "q5_k", "--model", str(d / "stories260K.bin"),
                "--tokenizer", str(d / "tok512.bin"))
    assert "q5_k" in e and "q4_0" in e
    e = run_err(leantune_bin, "--gguf", out, "--model", str(d / "stories260K.bin"))
    assert "--tokenizer" in e
    # a tokenizer with more tokens than the model's embedding rows
    model = build("smollm2")
    folder = tmp_path / "m"
    model.save_pretrained(folder, safe_serialization=True)
    assert byte_level_tokenizer(folder, 400, extra=120).get_vocab_size() > 350
    e = run_err(leantune_bin, "--gguf", out, "--model", str(folder))
    assert "350" in e and "tokenizer" in e
    assert not (tmp_path / "x.gguf").exists()

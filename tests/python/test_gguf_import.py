# `--model file.gguf`: GGUFs written by the `gguf` package (llama.cpp's own Python writer) from
# random-weight transformers Llamas (a tied SmolLM2-like one, an untied GQA one with Llama 3 rope
# scaling) at f32, f16, bf16, q8_0 and q4_0 give the same logits as the source safetensors whose
# weights hold exactly the values the GGUF stores (rounded to f16 / bf16, or gguf's own dequantized
# q8_0 / q4_0 blocks); GGUFs written by `leantune export --gguf` read back the same way; the
# tokenizer from GGUF metadata gives the ids of the source tokenizer (stories260K's llama2.c
# tok512.bin as "llama"; byte-level tokenizer.json files of the gpt-2, llama-bpe, qwen2 and smollm
# pre-tokenizer families as "gpt2", checked against the `tokenizers` library itself); greedy
# generation from the GGUF equals generation from the source (stories260K exported at every type:
# the tokens and logits of the same file read by the gguf package into a transformers folder); and
# bad GGUF models are refused naming the architecture, key or tensor.
import json
import subprocess
import tempfile

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as QT
from safetensors.torch import save_file
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from test_gguf_export import TEXT, byte_level_tokenizer, field, llama3_rope_factors, permute, spm_style_tokenizer
from test_model_parity import build, our_logits

TYPES = {"f32": QT.F32, "f16": QT.F16, "bf16": QT.BF16, "q8_0": QT.Q8_0, "q4_0": QT.Q4_0}
LINEARS = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
           "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}


def unpermute(w, n_head):
    # the inverse of permute(): llama.cpp's interleaved rotary rows back to HF's rotate-halves order
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_tensors(model):
    """{gguf name: (f32 numpy in GGUF row order, q/k head count or None)} of a transformers Llama."""
    c = model.config
    sd = {k: v.float().numpy() for k, v in model.state_dict().items() if "rotary" not in k}
    out = {"token_embd.weight": (sd["model.embed_tokens.weight"], None),
           "output_norm.weight": (sd["model.norm.weight"], None)}
    if not c.tie_word_embeddings:
        out["output.weight"] = (sd["lm_head.weight"], None)
    for l in range(c.num_hidden_layers):
        p = f"model.layers.{l}."
        out[f"blk.{l}.attn_norm.weight"] = (sd[p + "input_layernorm.weight"], None)
        out[f"blk.{l}.ffn_norm.weight"] = (sd[p + "post_attention_layernorm.weight"], None)
        for hf, gg in LINEARS.items():
            key = p + ("mlp." if hf in ("gate_proj", "up_proj", "down_proj") else "self_attn.") + hf + ".weight"
            heads = {"q_proj": c.num_attention_heads, "k_proj": c.num_key_value_heads}.get(hf)
            out[f"blk.{l}.{gg}.weight"] = (permute(sd[key], heads) if heads else sd[key], heads)
    return out


def stored(x, typ):
    """(bytes for GGUFWriter.add_tensor, raw dtype, the f32 values they hold) of f32 array x at `typ`."""
    qt = TYPES[typ] if x.ndim == 2 else QT.F32  # norms stay f32, as convert_hf_to_gguf.py writes them
    if qt in (QT.Q8_0, QT.Q4_0) and x.shape[-1] % 32:
        qt = QT.F16  # rows that 32-blocks do not divide: f16, as convert_hf_to_gguf.py does
    if qt == QT.F32:
        return x, None, x
    if qt == QT.F16:
        return x.astype(np.float16), None, x.astype(np.float16).astype(np.float32)
    q = gguf.quants.quantize(x, qt)
    return q, qt, gguf.quants.dequantize(q, qt).reshape(x.shape)


def write_gguf(path, model, typ, vocab=None):
    """The model as llama.cpp's convert_hf_to_gguf.py writes it; returns the HF state dict of the
    values the file holds (q/k rows un-permuted back)."""
    c = model.config
    HS = c.hidden_size // c.num_attention_heads
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_rope_dimension_count(HS)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    theta, scaling = rope_params_of(model)
    w.add_rope_freq_base(theta)
    w.add_vocab_size(c.vocab_size)
    if vocab:
        vocab(w)
    values = {}
    for name, (x, heads) in gguf_tensors(model).items():
        data, raw, held = stored(np.ascontiguousarray(x, dtype=np.float32), typ)
        w.add_tensor(name, data, raw_dtype=raw)
        values[name] = unpermute(held, heads) if heads else held
    if scaling:
        w.add_tensor("rope_freqs.weight", llama3_rope_factors(theta, scaling, HS))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return values


def rope_params_of(model):
    rp = getattr(model.config, "rope_parameters", None) or dict(model.config.rope_scaling or {},
                                                                rope_theta=model.config.rope_theta)
    kind = rp.get("rope_type", rp.get("type"))
    return rp["rope_theta"], (rp if kind == "llama3" else None)


def hf_folder_with(model, values, folder):
    """`model`'s folder (config.json) with its weights replaced by the GGUF-held `values`."""
    names = {gg: hf for hf, gg in [("model.embed_tokens.weight", "token_embd.weight"),
                                   ("model.norm.weight", "output_norm.weight"), ("lm_head.weight", "output.weight")]}
    for l in range(model.config.num_hidden_layers):
        p = f"model.layers.{l}."
        names[f"blk.{l}.attn_norm.weight"] = p + "input_layernorm.weight"
        names[f"blk.{l}.ffn_norm.weight"] = p + "post_attention_layernorm.weight"
        for hf, gg in LINEARS.items():
            names[f"blk.{l}.{gg}.weight"] = p + ("mlp." if hf in ("gate_proj", "up_proj", "down_proj")
                                                 else "self_attn.") + hf + ".weight"
    model.save_pretrained(folder, safe_serialization=True)
    save_file({names[k]: torch.tensor(np.ascontiguousarray(v)) for k, v in values.items()},
              str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def logits(leantune_bin, path, V, tmp_path, seed=0):
    ids = np.random.default_rng(seed).integers(0, V, size=80).tolist()
    return our_logits(leantune_bin, path, ids, tmp_path).reshape(-1, V)


@pytest.mark.parametrize("typ", list(TYPES))
@pytest.mark.parametrize("kind", ["smollm2", "llama3"])
def test_gguf_package_file_logits(leantune_bin, tmp_path, kind, typ):
    model = build(kind)
    values = write_gguf(tmp_path / "m.gguf", model, typ)
    if typ == "bf16":  # the file holds bf16-rounded weights: check that it does
        w = values["blk.0.attn_v.weight"]
        assert np.array_equal(w, torch.tensor(w).to(torch.bfloat16).float().numpy())
    ref_folder = hf_folder_with(model, values, tmp_path / "ref")
    V = model.config.vocab_size
    ours, ref = logits(leantune_bin, tmp_path / "m.gguf", V, tmp_path), logits(leantune_bin, ref_folder, V, tmp_path)
    # the same weights in the same order: equal (0 seen) but for the RoPE frequencies of the llama3
    # model, which the GGUF gives as factors fitted back to a Llama 3 scaling (2e-6 seen)
    assert np.abs(ours - ref).max() <= 1e-5, np.abs(ours - ref).max()
    assert np.abs(ref).max() > 1.0  # the logits carry signal
    if typ != "f32":  # and the rounding mattered: the unrounded source model differs
        model.save_pretrained(tmp_path / "src", safe_serialization=True)
        assert np.abs(logits(leantune_bin, tmp_path / "src", V, tmp_path) - ours).max() > 1e-4


@pytest.mark.parametrize("typ", ["f32", "f16", "q8_0", "q4_0"])
def test_exported_gguf_reads_back(leantune_bin, tmp_path, typ):
    model = build("llama3")
    folder = tmp_path / "src"
    model.save_pretrained(folder, safe_serialization=True)
    byte_level_tokenizer(folder, 280)
    r = subprocess.run([leantune_bin, "export", "--gguf", str(tmp_path / "m.gguf"), "--type", typ, "--model",
                        str(folder)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # the values our exporter stored, read with gguf's reader, as a safetensors model
    reader = gguf.GGUFReader(str(tmp_path / "m.gguf"))
    heads = {"attn_q": model.config.num_attention_heads, "attn_k": model.config.num_key_value_heads}
    values = {}
    for t in reader.tensors:
        if t.name == "rope_freqs.weight":
            continue
        x = gguf.quants.dequantize(t.data, t.tensor_type).reshape(list(reversed(t.shape.tolist())))
        h = heads.get(t.name.split(".")[2]) if t.name.startswith("blk.") else None
        values[t.name] = unpermute(x, h) if h else x
    ref = hf_folder_with(model, values, tmp_path / "ref")
    V = model.config.vocab_size
    ours = logits(leantune_bin, tmp_path / "m.gguf", V, tmp_path)
    assert np.abs(ours - logits(leantune_bin, ref, V, tmp_path)).max() <= 1e-5
    if typ == "f32":  # f32: the source model itself
        assert np.abs(ours - logits(leantune_bin, folder, V, tmp_path)).max() <= 1e-5


def test_gguf_to_gguf(leantune_bin, tmp_path):
    # a GGUF model exported again (its tokenizer taken from its own metadata): the same tensors,
    # the same vocabulary, the same logits
    model = build("smollm2")
    folder = tmp_path / "src"
    model.save_pretrained(folder, safe_serialization=True)
    byte_level_tokenizer(folder, 280)
    for src, out in [(folder, "a.gguf"), (tmp_path / "a.gguf", "b.gguf")]:
        r = subprocess.run([leantune_bin, "export", "--gguf", str(tmp_path / out), "--type", "f32", "--model", str(src)],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    a, b = gguf.GGUFReader(str(tmp_path / "a.gguf")), gguf.GGUFReader(str(tmp_path / "b.gguf"))
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type", "tokenizer.ggml.pre"):
        fa, fb = a.fields[key], b.fields[key]
        assert [bytes(fa.parts[i]) for i in fa.data] == [bytes(fb.parts[i]) for i in fb.data], key
    tb = {t.name: t for t in b.tensors}
    assert set(tb) == {t.name for t in a.tensors}
    for t in a.tensors:
        np.testing.assert_array_equal(np.asarray(t.data), np.asarray(tb[t.name].data), err_msg=t.name)
    V = model.config.vocab_size
    assert np.abs(logits(leantune_bin, tmp_path / "b.gguf", V, tmp_path) - logits(leantune_bin, folder, V, tmp_path)).max() <= 1e-5


def test_linear_rope_scaling(leantune_bin, tmp_path):
    # linear RoPE scaling travels as llama.rope.scaling.type / .factor (no tensor), both ways
    from test_model_parity import randomize
    from transformers import LlamaConfig, LlamaForCausalLM
    shape = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=300, max_position_embeddings=512)
    torch.manual_seed(0)
    model = randomize(LlamaForCausalLM(LlamaConfig(
        **shape, rope_parameters={"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0})).eval(), 1)
    folder = tmp_path / "src"
    model.save_pretrained(folder, safe_serialization=True)
    byte_level_tokenizer(folder, 280)
    r = subprocess.run([leantune_bin, "export", "--gguf", str(tmp_path / "m.gguf"), "--type", "f32", "--model",
                        str(folder)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    reader = gguf.GGUFReader(str(tmp_path / "m.gguf"))
    assert bytes(reader.fields["llama.rope.scaling.type"].parts[-1]).decode() == "linear"
    assert reader.fields["llama.rope.scaling.factor"].parts[-1][0] == 4.0
    V = shape["vocab_size"]
    ours = logits(leantune_bin, tmp_path / "m.gguf", V, tmp_path)
    assert np.abs(ours - logits(leantune_bin, folder, V, tmp_path)).max() <= 1e-5
    # the scaling matters: the same weights without it give other logits
    plain = LlamaForCausalLM(LlamaConfig(**shape, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}))
    plain.load_state_dict(model.state_dict())
    plain.save_pretrained(tmp_path / "plain", safe_serialization=True)
    assert np.abs(ours - logits(leantune_bin, tmp_path / "plain", V, tmp_path)).max() > 1e-3


def tokenize(leantune_bin, tok, texts, *extra):
    with tempfile.NamedTemporaryFile("w", suffix=".json") as inp:
        inp.write(json.dumps(texts))
        inp.flush()
        r = subprocess.run([leantune_bin, "tokenize", "--tokenizer", str(tok), "--input", inp.name, *extra],
                           capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


HARD = ["Once upon a time, there was a little girl named Lily.", "", " ", "  two  spaces\tand\ttabs\n\nnewlines\r\n",
        "café naïve — «quotes» 中文 😀 👍🏽", "Numbers 12345, 3.14159 and 1,000,000!", "don't I'LL we've THEY'RE it's",
        "a" * 100, "\u2581 literal block", "emoji\U0001F600\U0001F600 and bytes \x01\x7f"]


def generate(leantune_bin, *args):
    r = subprocess.run([leantune_bin, "generate", "--temperature", "0", "-q", *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


def hf_folder_from_gguf(path, folder):
    """The llama GGUF at `path` read by the gguf package alone (an oracle independent of ours) and
    written as a transformers folder: config from the llama.* metadata, every tensor dequantized
    (gguf's own f16 / bf16 / q8_0 / q4_0 decoding) and the q/k rows un-permuted to HF order."""
    from transformers import LlamaConfig
    r = gguf.GGUFReader(str(path))
    NH, NKV = field(r, "llama.attention.head_count"), field(r, "llama.attention.head_count_kv")
    names = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
             "output.weight": "lm_head.weight"}
    sd = {}
    for t in r.tensors:
        x = gguf.quants.dequantize(t.data, t.tensor_type).reshape(list(reversed(t.shape.tolist())))
        if t.name.startswith("blk."):
            _, l, gg, _ = t.name.split(".")
            h = {"attn_q": NH, "attn_k": NKV}.get(gg)
            x = unpermute(x, h) if h else x
            p = f"model.layers.{l}."
            hf = {"attn_norm": p + "input_layernorm", "ffn_norm": p + "post_attention_layernorm"}.get(gg)
            if hf is None:
                hf = next(p + ("mlp." if k.endswith(("gate_proj", "up_proj", "down_proj")) else "self_attn.") + k
                          for k, v in LINEARS.items() if v == gg)
            sd[hf + ".weight"] = x
        else:
            sd[names[t.name]] = x
    C = field(r, "llama.embedding_length")
    LlamaConfig(hidden_size=C, intermediate_size=field(r, "llama.feed_forward_length"),
                num_hidden_layers=field(r, "llama.block_count"), num_attention_heads=NH, num_key_value_heads=NKV,
                vocab_size=sd["model.embed_tokens.weight"].shape[0],
                max_position_embeddings=field(r, "llama.context_length"),
                rms_norm_eps=field(r, "llama.attention.layer_norm_rms_epsilon"),
                rope_theta=field(r, "llama.rope.freq_base"),
                tie_word_embeddings="lm_head.weight" not in sd).save_pretrained(folder)
    save_file({k: torch.tensor(np.ascontiguousarray(v, dtype=np.float32)) for k, v in sd.items()},
              str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def test_stories260k_gguf_tokenizer(leantune_bin, shared_dir, tmp_path):
    d = shared_dir / "models" / "stories260K"
    g = tmp_path / "s.gguf"
    r = subprocess.run([leantune_bin, "export", "--gguf", str(g), "--type", "f32", "--model",
                        str(d / "stories260K.bin"), "--tokenizer", str(d / "tok512.bin")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # tokenizer "llama" from the GGUF metadata: the ids and texts of tok512.bin (texts with the
    # special tokens shown differ on purpose: llama.cpp shows "<s> Once", run.c "<s>Once")
    ids = lambda out: [x["ids"] for x in out]
    assert ids(tokenize(leantune_bin, g, HARD)) == ids(tokenize(leantune_bin, d / "tok512.bin", HARD))
    for extra in ("--skip-special", "--no-special"):
        assert tokenize(leantune_bin, g, HARD, extra) == tokenize(leantune_bin, d / "tok512.bin", HARD, extra)


@pytest.mark.parametrize("typ", list(TYPES))
def test_stories260k_gguf_round_trip(leantune_bin, shared_dir, tmp_path, typ):
    # stories260K exported by us, then loaded by us (its own tokenizer, no --tokenizer) against the
    # same file read by the gguf package into a transformers folder: the same greedy tokens and logits
    d = shared_dir / "models" / "stories260K"
    tok = ["--tokenizer", str(d / "tok512.bin")]
    src = ["--model", str(d / "stories260K.bin"), *tok]
    g = tmp_path / "s.gguf"
    r = subprocess.run([leantune_bin, "export", "--gguf", str(g), "--type", typ, *src], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    ref = hf_folder_from_gguf(g, tmp_path / "ref")
    for prompt in ["Once upon a time", "Lily and Tom went to the park."]:
        got = generate(leantune_bin, "--model", str(g), "-p", prompt, "-n", "64", "--ignore-eos")
        assert got.startswith(prompt) and len(got) > len(prompt) + 100
        assert got == generate(leantune_bin, "--model", str(ref), *tok, "-p", prompt, "-n", "64", "--ignore-eos")
        # 16- and 8-bit rounding leaves these 64 tokens as the original model's; 4-bit changes them
        # within the first 64 (the dequantized model above is what q4_0 must equal)
        same = got == generate(leantune_bin, *src, "-p", prompt, "-n", "64", "--ignore-eos")
        assert same or typ == "q4_0", prompt
    V = 512
    ours = logits(leantune_bin, g, V, tmp_path)
    assert np.abs(ours - logits(leantune_bin, ref, V, tmp_path)).max() <= 1e-5
    # against the llama2.c original (interleaved RoPE there, q/k un-permuted to halves here): f32
    # equal up to float rounding, the other types off by their rounding
    ids = np.random.default_rng(0).integers(0, V, size=80).tolist()
    diff = np.abs(ours - our_logits(leantune_bin, d / "stories260K.bin", ids, tmp_path).reshape(-1, V)).max()
    assert diff <= 1e-4 if typ == "f32" else diff > 1e-4, diff


# Byte-level BPE tokenizers of each pre-tokenizer family (as their models' tokenizer.json files set
# them up), trained on TEXT; the GGUF export names the family in tokenizer.ggml.pre.
LLAMA3_RE = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2_RE = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"


def family_tokenizer(folder, family):
    tok = Tokenizer(models.BPE(ignore_merges=family == "llama-bpe"))
    bl = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=family in ("gpt-2", "smollm"))
    if family in ("llama-bpe", "qwen2"):
        regex = LLAMA3_RE if family == "llama-bpe" else QWEN2_RE
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(regex), "isolated"), bl])
    elif family == "smollm":
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), bl])
    else:
        tok.pre_tokenizer = bl
    tok.decoder = decoders.ByteLevel()
    corpus = TEXT + HARD + ["1234567890 don't 'll 3.5 THEY'RE\n\n  x"] * 3
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=330, special_tokens=["<|endoftext|>", "<|im_end|>"],
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text('{"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>"}')
    return tok


@pytest.mark.parametrize("family", ["gpt-2", "llama-bpe", "qwen2", "smollm"])
def test_byte_level_gguf_tokenizer(leantune_bin, tmp_path, family):
    model = build("smollm2")
    folder = tmp_path / "m"
    model.save_pretrained(folder, safe_serialization=True)
    tok = family_tokenizer(folder, family)
    g = tmp_path / "m.gguf"
    r = subprocess.run([leantune_bin, "export", "--gguf", str(g), "--type", "f32", "--model", str(folder)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    reader = gguf.GGUFReader(str(g))
    assert bytes(reader.fields["tokenizer.ggml.pre"].parts[-1]).decode() == family
    texts = HARD + ["<|im_end|> after a special token", "x<|endoftext|>y"]
    got = tokenize(leantune_bin, g, texts, "--no-special")
    assert [x["ids"] for x in got] == [tok.encode(t).ids for t in texts]  # the tokenizers library itself
    assert got == tokenize(leantune_bin, folder, texts, "--no-special")
    # greedy generation from the GGUF (its own tokenizer) equals the folder's
    for prompt in ["Once upon a time", "Numbers 12345"]:
        assert generate(leantune_bin, "--model", str(g), "-p", prompt, "-n", "32", "--ignore-eos") == \
            generate(leantune_bin, "--model", str(folder), "-p", prompt, "-n", "32", "--ignore-eos")


def test_spm_tokenizer_json_gguf(leantune_bin, tmp_path):
    # a SentencePiece-style tokenizer.json exported as "llama" (scores from its merge ranks): the
    # GGUF tokenizer's ids and texts equal the tokenizer.json's
    model = build("smollm2")
    folder = tmp_path / "m"
    model.save_pretrained(folder, safe_serialization=True)
    spm_style_tokenizer(folder)
    r = subprocess.run([leantune_bin, "export", "--gguf", str(tmp_path / "m.gguf"), "--type", "f32", "--model",
                        str(folder)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    texts = ["ab ab", "abc cab  ba", "a", "", " b", "ab\nab é", "aaabbb cc"]
    for extra in ([], ["--no-special"]):
        assert tokenize(leantune_bin, tmp_path / "m.gguf", texts, *extra) == tokenize(leantune_bin, folder, texts, *extra)


def test_gguf_package_vocab(leantune_bin, tmp_path):
    # tokenizer.ggml.* written by the gguf package (not our exporter): a llama-bpe vocabulary
    model = build("smollm2")
    folder = tmp_path / "m"
    model.save_pretrained(folder, safe_serialization=True)
    tok = family_tokenizer(folder, "llama-bpe")
    tj = json.loads(tok.to_str())
    inv = {i: t for t, i in tj["model"]["vocab"].items()}
    V = model.config.vocab_size
    tokens = [inv.get(i, f"[PAD{i}]") for i in range(V)]
    types = [3 if tokens[i] in ("<|endoftext|>", "<|im_end|>") else 1 if i in inv else 5 for i in range(V)]

    def vocab(w):
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("llama-bpe")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in tj["model"]["merges"]])
        w.add_bos_token_id(0)
        w.add_eos_token_id(1)
        w.add_add_bos_token(False)
    write_gguf(tmp_path / "v.gguf", model, "f32", vocab)
    texts = HARD + ["<|im_end|>x"]
    got = tokenize(leantune_bin, tmp_path / "v.gguf", texts, "--no-special")
    assert [x["ids"] for x in got] == [tok.encode(t).ids for t in texts]
    assert [x["decoded"] for x in got] == [tok.decode(tok.encode(t).ids, skip_special_tokens=False) for t in texts]


def run_err(leantune_bin, path, tmp_path):
    r = subprocess.run([leantune_bin, "logits", "--model", str(path), "--ids", "1,2", "--out", str(tmp_path / "o")],
                       capture_output=True, text=True)
    assert r.returncode == 1, (r.returncode, r.stderr)
    return r.stderr


def test_bad_gguf_models(leantune_bin, tmp_path):
    model = build("smollm2")
    # another architecture: named, with the supported list
    w = gguf.GGUFWriter(str(tmp_path / "q.gguf"), "qwen2")
    w.add_tensor("token_embd.weight", np.zeros((4, 32), np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    e = run_err(leantune_bin, tmp_path / "q.gguf", tmp_path)
    assert "qwen2" in e and "llama" in e and "q.gguf" in e
    # an unsupported tensor type (q4_K): named by number and name, with the supported types
    w = gguf.GGUFWriter(str(tmp_path / "k.gguf"), "llama")
    w.add_tensor("token_embd.weight", np.zeros((2, 144), np.uint8), raw_dtype=QT.Q4_K)  # 2 rows of 256
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    e = run_err(leantune_bin, tmp_path / "k.gguf", tmp_path)
    assert "q4_K" in e and "12" in e and "q8_0" in e and "token_embd.weight" in e
    # a missing hyperparameter: the key named
    write_gguf(tmp_path / "ok.gguf", model, "f32")
    raw = (tmp_path / "ok.gguf").read_bytes()
    (tmp_path / "nokey.gguf").write_bytes(raw.replace(b"llama.block_count", b"llama.block_cou_t"))
    e = run_err(leantune_bin, tmp_path / "nokey.gguf", tmp_path)
    assert "llama.block_count" in e
    # a tensor a llama does not have: named
    (tmp_path / "extra.gguf").write_bytes(raw.replace(b"blk.0.ffn_up.weight", b"blk.0.ffn_xx.weight"))
    e = run_err(leantune_bin, tmp_path / "extra.gguf", tmp_path)
    assert "blk.0.ffn_xx.weight" in e
    # truncated: named as such
    (tmp_path / "cut.gguf").write_bytes(raw[:len(raw) - 100])
    e = run_err(leantune_bin, tmp_path / "cut.gguf", tmp_path)
    assert "cut.gguf" in e and "past the end of the file" in e


@pytest.mark.parametrize("typ", ["q8_0", "q4_0"])
def test_block_gguf_weights_as_stored(leantune_bin, tmp_path, typ):
    # `--weights q8_0` / `q4_0` on a GGUF of that type keeps its linear weights' blocks as stored (q/k
    # rows un-permuted, no f32 copy); on a safetensors copy of the GGUF's values it quantizes them
    # again with ggml's reference quantizer, which gives back the same blocks (a decoded block
    # re-quantizes to itself: its largest element decodes to q·d with q the end of the grid). So the
    # logits are equal bit for bit, and close to the f32 ones.
    model = build("smollm2")
    values = write_gguf(tmp_path / "m.gguf", model, typ)
    ref = hf_folder_with(model, values, tmp_path / "ref")
    V = model.config.vocab_size
    ids = np.random.default_rng(3).integers(0, V, size=80).tolist()
    w = ["--weights", typ]
    stored = our_logits(leantune_bin, tmp_path / "m.gguf", ids, tmp_path, w)
    np.testing.assert_array_equal(stored, our_logits(leantune_bin, ref, ids, tmp_path, w))
    f32 = our_logits(leantune_bin, ref, ids, tmp_path)
    assert 0 < np.abs(stored - f32).max() < 0.05 * np.abs(f32).max()

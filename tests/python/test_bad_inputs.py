# Bad inputs against the CLI: each run must end with a non-zero exit status (never a signal) and a
# short message naming the file, key, tensor or flag at fault, in leantune's words (no yaml-cpp,
# nlohmann, CLI11 or libstdc++ wording). Covers 100,000-deep JSON in config.json, a safetensors
# header, tokenizer.json, adapter_config.json and a JSONL line; YAML of the wrong type; paths that
# are folders; a tokenizer's format by its name; a truncated llama2.c tokenizer; NaN weights; an
# integer tensor; and out-of-range flag values.
import json
import os
import struct
import subprocess

import pytest

DEEP = "[" * 100000 + "]" * 100000
LEAKS = ("yaml-cpp", "bad conversion", "[json.exception", "basic_filebuf", "std::bad_alloc", "terminate called",
         "179769313486231570814527423731704356798070567525844996598917476803157260780028538760360765")


@pytest.fixture(scope="module")
def stories(shared_dir):
    d = shared_dir / "models" / "stories260K"
    if not (d / "stories260K.bin").exists():
        pytest.skip(f"stories260K not found under {shared_dir}")
    return d


def run_bad(leantune_bin, *args, needles=()):
    """Runs leantune, expects an error exit (not a signal) whose stderr holds every needle."""
    p = subprocess.run([leantune_bin, *map(str, args)], capture_output=True, text=True, timeout=300)
    assert p.returncode > 0, f"exit {p.returncode} (a negative status is a signal)\n{p.stderr[-2000:]}"
    err = p.stderr
    for n in needles:
        assert str(n) in err, f"{n!r} not in: {err[-2000:]}"
    for leak in LEAKS:
        assert leak not in err, f"{leak!r} leaked into: {err[-2000:]}"
    assert len(err) < 4000, f"message too long ({len(err)} chars): {err[:600]}"
    return err


def safetensors_bytes(tensors):
    """{name: (dtype, shape, bytes)} -> a safetensors file."""
    header, data = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)  # the data starts 8-byte aligned
    return struct.pack("<Q", len(h)) + h + data


def tiny_hf_folder(d, embed_dtype="F32"):
    """A 1-layer Llama (C=8, F=16, V=16) of zeros; the embedding stored as `embed_dtype` (4-byte)."""
    C, F, V = 8, 16, 16
    cfg = {"model_type": "llama", "hidden_size": C, "num_hidden_layers": 1, "num_attention_heads": 2,
           "num_key_value_heads": 2, "intermediate_size": F, "vocab_size": V, "max_position_embeddings": 32,
           "rms_norm_eps": 1e-5, "tie_word_embeddings": False}
    shapes = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,), "lm_head.weight": (V, C),
              "model.layers.0.input_layernorm.weight": (C,), "model.layers.0.post_attention_layernorm.weight": (C,)}
    for m in ("q_proj", "k_proj", "v_proj", "o_proj"):
        shapes[f"model.layers.0.self_attn.{m}.weight"] = (C, C)
    shapes.update({"model.layers.0.mlp.gate_proj.weight": (F, C), "model.layers.0.mlp.up_proj.weight": (F, C),
                   "model.layers.0.mlp.down_proj.weight": (C, F)})
    tensors = {}
    for name, shape in shapes.items():
        n = 1
        for s in shape:
            n *= s
        dtype = embed_dtype if name == "model.embed_tokens.weight" else "F32"
        tensors[name] = (dtype, shape, b"\0" * (4 * n))
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "model.safetensors").write_bytes(safetensors_bytes(tensors))
    return d


def test_deep_config_json(leantune_bin, tmp_path):
    d = tiny_hf_folder(tmp_path / "m")
    (d / "config.json").write_text('{"model_type": "llama", "hidden_size": ' + DEEP + "}")
    run_bad(leantune_bin, "info", "--model", d, needles=[d / "config.json", "deeper than 64"])


def test_deep_safetensors_header(leantune_bin, tmp_path):
    d = tiny_hf_folder(tmp_path / "m")
    h = DEEP.encode()
    (d / "model.safetensors").write_bytes(struct.pack("<Q", len(h)) + h)
    run_bad(leantune_bin, "info", "--model", d, needles=[d / "model.safetensors", "deeper than 64"])


def test_deep_tokenizer_json(leantune_bin, tmp_path):
    p = tmp_path / "tokenizer.json"
    p.write_text('{"model": {"type": "BPE", "vocab": ' + DEEP + "}}")
    run_bad(leantune_bin, "tokenize", "--tokenizer", p, "--text", "hi", needles=[p, "deeper than 64"])


def test_deep_adapter_config(leantune_bin, tmp_path):
    d = tiny_hf_folder(tmp_path / "m")
    a = tmp_path / "adapter"
    a.mkdir()
    (a / "adapter_config.json").write_text('{"peft_type": "LORA", "r": ' + DEEP + "}")
    (a / "adapter_model.safetensors").write_bytes(safetensors_bytes({}))
    run_bad(leantune_bin, "merge", "--model", d, "--adapter", a, "--out", tmp_path / "out",
            needles=[a / "adapter_config.json", "deeper than 64"])


def train_yaml(tmp_path, stories, extra="", data=None):
    if data is None:
        data = tmp_path / "data.txt"
        data.write_text("Once upon a time there was a cat.\n\nThe cat sat on a mat.\n")
    y = tmp_path / "run.yaml"
    y.write_text(f"base_model: {stories / 'stories260K.bin'}\ntokenizer: {stories / 'tok512.bin'}\n"
                 f"datasets: [{data}]\noutput_dir: {tmp_path / 'out'}\nmax_steps: 1\n{extra}")
    return y


def test_deep_jsonl_line(leantune_bin, tmp_path, stories):
    data = tmp_path / "data.jsonl"
    data.write_text('{"text": "Once upon a time"}\n{"text": ' + DEEP + "}\n")
    y = train_yaml(tmp_path, stories, data=data)
    run_bad(leantune_bin, "train", y, needles=[f"{data}:2", "deeper than 64"])


def test_yaml_wrong_type_names_file_line_key(leantune_bin, tmp_path, stories):
    y = train_yaml(tmp_path, stories, extra="lora_r: [1, 2]\n")
    run_bad(leantune_bin, "train", y, needles=[y, "line 6", "'lora_r'", "an integer"])
    y.write_text(y.read_text().replace("lora_r: [1, 2]", "[a, b]: 1"))
    run_bad(leantune_bin, "train", y, needles=[f"{y}:6:"])


def test_directory_where_a_file_is_expected(leantune_bin, tmp_path, stories):
    run_bad(leantune_bin, "train", tmp_path, needles=[tmp_path, "is a directory"])
    run_bad(leantune_bin, "tokenize", "--tokenizer", tmp_path, "--text", "hi", needles=[tmp_path])
    y = train_yaml(tmp_path, stories)
    y.write_text(y.read_text().replace(str(stories / "tok512.bin"), str(tmp_path / "tok.json")))
    (tmp_path / "tok.json").mkdir()
    run_bad(leantune_bin, "train", y, needles=[tmp_path / "tok.json"])


def test_non_json_dot_json_tokenizer_is_a_json_error(leantune_bin, tmp_path):
    p = tmp_path / "tokenizer.json"
    p.write_text("not json at all")
    err = run_bad(leantune_bin, "tokenize", "--tokenizer", p, "--text", "hi", needles=[p, "malformed JSON"])
    assert "llama2.c" not in err, err


def test_huge_token_id(leantune_bin, tmp_path):
    p = tmp_path / "tokenizer.json"
    p.write_text(json.dumps({"model": {"type": "BPE", "vocab": {"a": 0, "b": 16777215}, "merges": []}}))
    run_bad(leantune_bin, "tokenize", "--tokenizer", p, "--text", "ab", needles=[p, "'b'", "16777215"])


def test_truncated_llama2c_tokenizer(leantune_bin, tmp_path, stories):
    raw = (stories / "tok512.bin").read_bytes()
    off = 4
    for _ in range(300):
        (n,) = struct.unpack_from("<i", raw, off + 4)
        off += 8 + n
    cut = tmp_path / "tok300.bin"
    cut.write_bytes(raw[:off])
    run_bad(leantune_bin, "generate", "--model", stories / "stories260K.bin", "--tokenizer", cut, "-n", "4",
            needles=[cut, "300 entries", "512"])
    y = train_yaml(tmp_path, stories)
    y.write_text(y.read_text().replace(str(stories / "tok512.bin"), str(cut)))
    run_bad(leantune_bin, "train", y, needles=[cut, "300 entries", "512"])


def test_nan_scores_in_llama2c_tokenizer(leantune_bin, tmp_path, stories):
    raw = bytearray((stories / "tok512.bin").read_bytes())
    raw[4 + 8 * 0 + 0:4 + 4] = struct.pack("<f", float("nan"))  # entry 0's score
    p = tmp_path / "nan.bin"
    p.write_bytes(bytes(raw))
    run_bad(leantune_bin, "tokenize", "--tokenizer", p, "--text", "hi", needles=[p, "entry 0", "finite"])


def test_nan_model_is_reported_as_nan_logits(leantune_bin, tmp_path, stories):
    raw = bytearray((stories / "stories260K.bin").read_bytes())
    raw[28:] = struct.pack("<f", float("nan")) * ((len(raw) - 28) // 4)  # every weight after the 7-int header
    m = tmp_path / "nan.bin"
    m.write_bytes(bytes(raw))
    err = run_bad(leantune_bin, "generate", "--model", m, "--tokenizer", stories / "tok512.bin", "-n", "4",
                  "--temperature", "0", needles=["logits", "non-finite", "NaN"])
    assert "no_repeat_ngram_size" not in err, err


def test_integer_tensor_names_file_tensor_and_dtypes(leantune_bin, tmp_path):
    d = tiny_hf_folder(tmp_path / "m", embed_dtype="I32")
    run_bad(leantune_bin, "logits", "--model", d, "--ids", "1,2", "--out", tmp_path / "l.bin",
            needles=[d / "model.safetensors", "model.embed_tokens.weight", "I32", "F32, F16 or BF16"])


@pytest.mark.parametrize("flag,value,needles", [
    ("--max-new-tokens", "-1", ["--max-new-tokens", "-1", ">= 0"]),
    ("--temperature", "-5", ["--temperature", ">= 0"]),
    ("--top-p", "7", ["--top-p", "7", ">= 0 and <= 1"]),
    ("--max-new-tokens", "9" * 300, ["--max-new-tokens"]),
])
def test_flag_out_of_range_is_short(leantune_bin, stories, flag, value, needles):
    err = run_bad(leantune_bin, "generate", "--model", stories / "stories260K.bin", "--tokenizer",
                  stories / "tok512.bin", flag, value, needles=needles)
    assert len(err) < 400, err


@pytest.mark.skipif(os.environ.get("LEANTUNE_SANITIZED") == "1",
                    reason="AddressSanitizer reserves terabytes of address space: no RLIMIT_AS can apply")
def test_out_of_memory_is_a_clear_error(leantune_bin, tmp_path, stories):
    """Under a 400 MB address-space limit a 2M-token tokenizer.json (38 MB of text, several
    hundred MB as parsed tables) cannot be built, while tok512.bin can: the allocation failure is
    reported as running out of memory, with what to do, and a non-zero exit."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (400 << 20, 400 << 20))

    def tokenize(tok):
        return subprocess.run([leantune_bin, "tokenize", "--tokenizer", str(tok), "--text", "hi"], capture_output=True,
                              text=True, timeout=300, preexec_fn=limit, env={**os.environ, "OMP_NUM_THREADS": "1"})

    ok = tokenize(stories / "tok512.bin")
    assert ok.returncode == 0, f"the limit alone breaks the run: {ok.stderr[-2000:]}"
    p = tmp_path / "tokenizer.json"
    with open(p, "w") as f:
        f.write('{"model": {"type": "BPE", "merges": [], "vocab": {')
        f.write(",".join(f'"t{i}": {i}' for i in range(2_000_000)))
        f.write("}}}")
    r = tokenize(p)
    assert r.returncode > 0, f"exit {r.returncode}\n{r.stderr[-2000:]}"
    assert "out of memory" in r.stderr and "leantune plan" in r.stderr, r.stderr[-2000:]
    assert "bad_alloc" not in r.stderr, r.stderr[-2000:]

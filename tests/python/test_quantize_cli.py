# `leantune quantize` end to end: a bf16 Hugging Face folder quantized to NF4 + double quant holds,
# for every linear weight, exactly bitsandbytes' quantize_4bit parts (the documented layout of
# src/io/quant_model.cpp), the other tensors unchanged and config.json's quantization_config; a
# quantized stories260K trains with LoRA from the folder; bad requests fail with clear messages.
import json
import re
import subprocess

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file, save_file as save_numpy
from safetensors.torch import load_file as load_torch, save_file

try:
    import bitsandbytes.functional as bnbf
except Exception as e:  # noqa: BLE001 - any import failure means no oracle
    pytest.skip(f"bitsandbytes cannot be imported ({e!r}); install it with scripts/install-test-deps.sh",
                allow_module_level=True)

C, F, L, V = 64, 160, 2, 40
LINEARS = {"self_attn.q_proj": (C, C), "self_attn.k_proj": (32, C), "self_attn.v_proj": (32, C),
           "self_attn.o_proj": (C, C), "mlp.gate_proj": (F, C), "mlp.up_proj": (F, C), "mlp.down_proj": (C, F)}


def run(cmd, ok=True):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if ok:
        assert p.returncode == 0, p.stderr + p.stdout
    return p


@pytest.fixture(scope="module")
def hf_bf16(tmp_path_factory):
    d = tmp_path_factory.mktemp("hf")
    g = torch.Generator().manual_seed(0)
    t = {"model.embed_tokens.weight": torch.randn(V, C, generator=g), "model.norm.weight": torch.ones(C)}
    for l in range(L):
        t[f"model.layers.{l}.input_layernorm.weight"] = torch.ones(C)
        t[f"model.layers.{l}.post_attention_layernorm.weight"] = torch.ones(C)
        for m, shape in LINEARS.items():
            t[f"model.layers.{l}.{m}.weight"] = torch.randn(*shape, generator=g) * 0.05
    save_file({k: v.to(torch.bfloat16) for k, v in t.items()}, str(d / "model.safetensors"))
    (d / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": C, "intermediate_size": F, "num_hidden_layers": L,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": V, "tie_word_embeddings": True,
        "custom_field": "kept"}))
    return d


def test_nf4_double_quant_folder_matches_bitsandbytes(leantune_bin, hf_bf16, tmp_path):
    out = tmp_path / "nf4"
    run([leantune_bin, "quantize", "--model", hf_bf16, "--type", "nf4", "--double-quant", "--out", out])
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["quantization_config"] == {"quant_method": "leantune", "type": "nf4", "blocksize": 64,
                                          "double_quant": True}
    assert cfg["custom_field"] == "kept"
    got = load_torch(str(out / "model.safetensors"))
    src = load_torch(str(hf_bf16 / "model.safetensors"))
    for name, w in src.items():
        if not any(m in name for m in LINEARS):
            assert got[name].dtype == torch.bfloat16 and torch.equal(got[name], w), name  # kept as it was
            continue
        assert name not in got
        packed, st = bnbf.quantize_4bit(w.float(), blocksize=64, compress_statistics=True, quant_type="nf4")
        part = {k: got[name + "." + k].numpy() for k in ("codes", "qabsmax", "absmax2", "offset")}
        np.testing.assert_array_equal(part["codes"], packed.numpy().reshape(-1), err_msg=name)
        np.testing.assert_array_equal(part["qabsmax"], st.absmax.numpy(), err_msg=name)
        np.testing.assert_array_equal(part["absmax2"].view(np.uint32), st.state2.absmax.numpy().view(np.uint32),
                                      err_msg=name)
        assert part["offset"].view(np.uint32)[0] == np.float32(st.offset.item()).view(np.uint32), name


def test_quantized_stories260k_trains_and_bad_requests_fail(leantune_bin, shared_dir, tmp_path):
    model = shared_dir / "models/stories260K/stories260K.bin"
    out = tmp_path / "int8"
    run([leantune_bin, "quantize", "--model", model, "--type", "int8", "--out", out])
    args = ["--base_model", out, "--tokenizer", shared_dir / "models/stories260K/tok512.bin",
            "--datasets", shared_dir / "data/aesop_fables/aesop_fables.txt", "--method", "lora",
            "--lora_target_modules", "all-linear", "--micro_batch_size", "2", "--sequence_len", "64",
            "--max_steps", "2", "--eval_batches", "1", "--threads", "1", "--output_dir", tmp_path / "run"]
    r = run([leantune_bin, "train", *args])
    frozen = int(re.search(r"^frozen_weights\s+(\d+)", r.stdout, re.M).group(1))
    assert "model.layers.0.self_attn.q_proj.weight.int8" in run([leantune_bin, "plan", *args, "--buffers"]).stdout
    assert frozen < 4 * 260_000 * 0.6, r.stdout  # embeddings stay fp32, the linears shrink to a quarter
    assert (tmp_path / "run/adapter/adapter_model.safetensors").exists()

    bad = run([leantune_bin, "quantize", "--model", out, "--type", "nf4", "--out", tmp_path / "x"], ok=False)
    assert bad.returncode == 1 and "already quantized (int8" in bad.stderr, bad.stderr
    bad = run([leantune_bin, "quantize", "--model", model, "--blocksize", "100", "--out", tmp_path / "x"], ok=False)
    assert bad.returncode == 1 and "block size 100 is not supported" in bad.stderr, bad.stderr
    bad = run([leantune_bin, "train", *args, "--quantization", "nf4"], ok=False)
    assert bad.returncode == 1 and "already quantized (int8" in bad.stderr, bad.stderr
    bad = run([leantune_bin, "train", *args, "--method", "full"], ok=False)
    assert bad.returncode == 1 and "stored quantized (int8)" in bad.stderr, bad.stderr
    # truncated row scales
    t = load_file(str(out / "model.safetensors"))
    t["model.layers.3.mlp.up_proj.weight.row_absmax"] = t["model.layers.3.mlp.up_proj.weight.row_absmax"][:-2]
    save_numpy(t, str(out / "model.safetensors"))
    bad = run([leantune_bin, "train", *args], ok=False)
    assert bad.returncode == 1, bad.stdout
    assert "'model.layers.3.mlp.up_proj.weight'" in bad.stderr and "row scales has 170 values, expected 172" in \
        bad.stderr, bad.stderr

# An HF Llama with attention_bias (q, k, v AND o_proj biases) and mlp_bias (gate, up, down biases),
# against transformers and PEFT (the oracles): next-token logits, full fine-tuning gradients of
# every tensor including the seven biases, LoRA gradients with PEFT's bias="none" / "all", a full
# fine-tune's saved folder loading in transformers with its trained biases, a LoRA adapter with
# trained biases loading in PEFT (and in us) and merging into a folder transformers loads; and
# checkpoint accounting: an extra tensor, a missing bias, or a bias the config does not give the
# model is an error naming the tensor (and the file), never a silent drop.
import json
import shutil
import subprocess

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM

from test_model_parity import check, hf_logits, our_logits, randomize, PROMPT_LEN, DECODE_STEPS
from test_train_parity import B, T, MODULES, hf_loss, rel_err, run_grad

BIASES = [f"{p}.{m}.bias" for p, m in [("self_attn", "q_proj"), ("self_attn", "k_proj"), ("self_attn", "v_proj"),
                                       ("self_attn", "o_proj"), ("mlp", "gate_proj"), ("mlp", "up_proj"),
                                       ("mlp", "down_proj")]]


def build_biased(seed=0):
    torch.manual_seed(seed)
    c = LlamaConfig(hidden_size=64, intermediate_size=144, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, vocab_size=300, max_position_embeddings=512, rms_norm_eps=1e-5,
                    rope_theta=10000.0, attention_bias=True, mlp_bias=True)
    return randomize(LlamaForCausalLM(c).eval(), seed + 1)  # biases ~ N(0, 0.08²), like the weights


@pytest.fixture
def biased(tmp_path):
    model = build_biased()
    folder = tmp_path / "biased"
    model.save_pretrained(folder, safe_serialization=True)
    names = set(load_file(str(folder / "model.safetensors")))
    assert {f"model.layers.1.{b}" for b in BIASES} <= names, "transformers did not save the seven biases"
    return model, folder


def test_logits_match_transformers_and_every_bias_matters(leantune_bin, tmp_path, biased):
    model, folder = biased
    # 1e-4 absolute on logits of magnitude ~2.5 (asserted > 0.5 in check): both sides compute in f32,
    # and reordered sums of <= 144 products (eps 6e-8) through 2 layers, softmax and a 64-wide head
    # differ by ~1e-6 (measured: 1.1e-6 to 1.5e-6 for these seeds, fast and reference kernels). A
    # dropped bias moves the logits by > 1e-2 (asserted below for each of the seven projections),
    # so the bound separates right from wrong with two orders of magnitude to spare either side.
    check(leantune_bin, model, folder, tmp_path, seed=7)
    check(leantune_bin, model, folder, tmp_path, seed=8, extra=("--prefill-block", "7"))
    check(leantune_bin, model, folder, tmp_path, seed=9, extra=("--reference",))
    ids = np.random.default_rng(7).integers(0, 300, size=PROMPT_LEN + DECODE_STEPS).tolist()
    ref = hf_logits(model, ids)
    for b in BIASES:
        dropped = build_biased()
        with torch.no_grad():
            for layer in dropped.model.layers:
                layer.get_submodule(b.rsplit(".", 1)[0]).bias.zero_()
        assert np.abs(hf_logits(dropped, ids) - ref).max() > 1e-2, f"{b} changes nothing: the test proves nothing"


def test_full_gradients_of_every_bias_match_pytorch(leantune_bin, tmp_path, biased):
    model, folder = biased
    tokens = np.random.default_rng(4).integers(0, 300, size=B * T)
    loss = hf_loss(model, tokens)
    loss.backward()
    ours_loss, grads = run_grad(leantune_bin, folder, tokens, tmp_path, ["--method", "full"])
    # 1e-4 relative: each gradient is an f32 sum over B*T = 48 tokens of products through 2 layers,
    # whose reordering between torch and us costs ~1e-6 relative; a missing or wrong bias term
    # (e.g. db not summed over all tokens, or o_proj's bias not added in the forward) is O(1).
    assert abs(ours_loss - loss.item()) <= 1e-4 * abs(loss.item())
    assert set(grads) == {n for n, _ in model.named_parameters()}
    for name, p in model.named_parameters():
        err = rel_err(grads[name], p.grad.numpy())
        assert err <= 1e-4, f"{name}: relative error {err:.3g}"
    assert np.abs(grads["model.layers.0.self_attn.o_proj.bias"]).max() > 1e-4  # a real gradient, not zeros


@pytest.mark.parametrize("bias", ["none", "all"])
def test_lora_bias_option_matches_peft(leantune_bin, tmp_path, biased, bias):
    from peft import LoraConfig, get_peft_model
    model, folder = biased
    cfg = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=MODULES, init_lora_weights=False,
                     bias=bias, task_type="CAUSAL_LM")
    torch.manual_seed(5)
    pm = get_peft_model(model, cfg)
    adir = tmp_path / "adapter"
    pm.save_pretrained(adir)
    tokens = np.random.default_rng(3).integers(0, 300, size=B * T)
    loss = hf_loss(pm, tokens)
    loss.backward()
    _, grads = run_grad(leantune_bin, folder, tokens, tmp_path,
                        ["--adapter", str(adir), "--lora-r", "8", "--lora-alpha", "16", "--lora-bias", bias])
    n_bias = 0
    for name, p in pm.named_parameters():
        if not p.requires_grad:
            continue
        key = name.replace(".default", "")
        if key.endswith(".bias"):  # we name a bias by its HF name; PEFT wraps it in base_layer
            key = key.replace("base_model.model.", "", 1).replace(".base_layer", "")
            n_bias += 1
        err = rel_err(grads[key], p.grad.numpy())
        assert err <= 1e-4, f"{key}: relative error {err:.3g}"
    # LoRA freezes the biases unless bias says otherwise: none, or all seven per layer
    assert n_bias == (0 if bias == "none" else 7 * model.config.num_hidden_layers)
    assert len(grads) == 2 * 7 * model.config.num_hidden_layers + n_bias


def add_tokenizer_and_data(folder, tmp_path):
    # a byte-level BPE tokenizer trained here (vocab 290 < the model's 300) and a text dataset
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
    words = "the fox crow wolf lamb said once upon a time there was grapes sour cheese".split()
    rng = np.random.default_rng(0)
    docs = [" ".join(rng.choice(words, size=rng.integers(8, 30))) + "." for _ in range(60)]
    (tmp_path / "data.txt").write_text("\n\n".join(docs) + "\n")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(docs, trainers.BpeTrainer(vocab_size=290, special_tokens=["<|eos|>"],
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(str(folder / "tokenizer.json"))
    return tmp_path / "data.txt"


def train(leantune_bin, folder, data, out, *extra):
    r = subprocess.run([leantune_bin, "train", "--base-model", str(folder), "--datasets", str(data), "--max-steps", "3",
                        "--learning-rate", "1e-2", "--micro-batch-size", "2", "--sequence-len", "32", "--threads", "1",
                        "--output-dir", str(out), *extra], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_full_fine_tune_folder_loads_in_transformers_with_trained_biases(leantune_bin, tmp_path, biased):
    _, folder = biased
    out = tmp_path / "out"
    train(leantune_bin, folder, add_tokenizer_and_data(folder, tmp_path), out, "--method", "full")
    before, after = load_file(str(folder / "model.safetensors")), load_file(str(out / "model" / "model.safetensors"))
    assert set(after) == set(before)
    for b in BIASES:
        assert not np.array_equal(before[f"model.layers.0.{b}"], after[f"model.layers.0.{b}"]), f"{b} not trained"
    tuned, info = LlamaForCausalLM.from_pretrained(out / "model", dtype=torch.float32, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    ids = np.random.default_rng(5).integers(0, 300, size=PROMPT_LEN + DECODE_STEPS).tolist()
    ours = our_logits(leantune_bin, out / "model", ids, tmp_path).reshape(DECODE_STEPS, -1)
    # the same 1e-4 bound as the parity test above: the same model, f32 on both sides
    assert np.abs(ours - hf_logits(tuned.eval(), ids)[:DECODE_STEPS]).max() <= 1e-4


def test_lora_trained_biases_reach_peft_and_merge(leantune_bin, tmp_path, biased):
    # LoRA on q, o and up with bias "all": those three modules' biases are saved where PEFT keeps a
    # wrapped module's bias (base_layer.bias), the other four under their plain names
    from peft import PeftModel
    _, folder = biased
    out = tmp_path / "out"
    train(leantune_bin, folder, add_tokenizer_and_data(folder, tmp_path), out, "--lora-target-modules",
          "q_proj,o_proj,up_proj", "--lora-bias", "all", "--lora-r", "4", "--lora-alpha", "8")
    saved = load_file(str(out / "adapter" / "adapter_model.safetensors"))
    prefix = "base_model.model.model.layers.1."
    assert prefix + "self_attn.o_proj.base_layer.bias" in saved and prefix + "mlp.down_proj.bias" in saved
    ids = np.random.default_rng(6).integers(0, 290, size=PROMPT_LEN + DECODE_STEPS).tolist()
    pm = PeftModel.from_pretrained(build_biased(), str(out / "adapter")).eval()
    ref = hf_logits(pm, ids)[:DECODE_STEPS]
    assert np.abs(hf_logits(build_biased(), ids)[:DECODE_STEPS] - ref).max() > 1e-2, "training changed nothing"
    # we load the adapter PEFT loads (biases included) to the same logits; 1e-4 as above
    ours = our_logits(leantune_bin, folder, ids, tmp_path, ("--adapter", str(out / "adapter"))).reshape(DECODE_STEPS, -1)
    assert np.abs(ours - ref).max() <= 1e-4
    r = subprocess.run([leantune_bin, "merge", "--model", str(folder), "--adapter", str(out / "adapter"), "--out",
                        str(tmp_path / "merged")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    merged, info = LlamaForCausalLM.from_pretrained(tmp_path / "merged", dtype=torch.float32, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    # 1e-4: f32 throughout; merging W + s·B·A reorders one sum per weight (~1e-7 relative)
    assert np.abs(hf_logits(merged.eval(), ids)[:DECODE_STEPS] - ref).max() <= 1e-4


def run_logits(leantune_bin, folder, tmp_path):
    return subprocess.run([leantune_bin, "logits", "--model", str(folder), "--ids", "1,2,3", "--out",
                           str(tmp_path / "l.f32")], capture_output=True, text=True)


def rewrite(folder, change):
    tensors = load_file(str(folder / "model.safetensors"))
    change(tensors)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})


def test_extra_tensor_is_an_error_naming_it(leantune_bin, tmp_path, biased):
    _, folder = biased
    rewrite(folder, lambda t: t.update({"model.layers.0.self_attn.extra.weight": np.ones((4, 4), np.float32)}))
    for cmd in (["logits", "--ids", "1,2,3", "--out", str(tmp_path / "l.f32")],
                ["grad", "--tokens", str(tmp_path / "t.i32"), "--seq", "3", "--out", str(tmp_path)]):
        np.asarray([1, 2, 3], np.int32).tofile(tmp_path / "t.i32")
        r = subprocess.run([leantune_bin, cmd[0], "--model", str(folder), *cmd[1:]], capture_output=True, text=True)
        assert r.returncode == 1, (r.returncode, r.stderr)  # an error message and exit 1, not a signal
        assert "'model.layers.0.self_attn.extra.weight'" in r.stderr and "model.safetensors" in r.stderr, r.stderr


def test_missing_bias_and_unexpected_bias_are_errors_naming_them(leantune_bin, tmp_path, biased):
    _, folder = biased
    missing = tmp_path / "missing"
    shutil.copytree(folder, missing)
    rewrite(missing, lambda t: t.pop("model.layers.1.mlp.down_proj.bias"))
    r = run_logits(leantune_bin, missing, tmp_path)
    assert r.returncode == 1 and "missing tensor 'model.layers.1.mlp.down_proj.bias'" in r.stderr, r.stderr
    assert "mlp_bias" in r.stderr
    # the same weights under a config without the flags: transformers would drop the biases; we refuse
    cfg = json.loads((folder / "config.json").read_text())
    cfg["mlp_bias"] = False
    (folder / "config.json").write_text(json.dumps(cfg))
    r = run_logits(leantune_bin, folder, tmp_path)
    assert r.returncode == 1 and "mlp.gate_proj.bias" in r.stderr and "mlp_bias" in r.stderr, r.stderr


def test_old_rotary_inv_freq_buffers_are_ignored(leantune_bin, tmp_path, biased):
    model, folder = biased
    half = model.config.hidden_size // model.config.num_attention_heads // 2
    rewrite(folder, lambda t: t.update({f"model.layers.{l}.self_attn.rotary_emb.inv_freq": np.ones(half, np.float32)
                                        for l in range(2)}))
    check(leantune_bin, model, folder, tmp_path, seed=12)

# Invalid settings and inputs at the CLI: each run must end with a non-zero exit status (not a
# signal) and a message naming the key or flag, the value and the allowed range (or the tensor,
# dataset or model limit at fault). Covers issue 19's "runaway resources" and "silently wrong"
# classes: out-of-range config keys, duplicate and unknown YAML keys, --threads, lora_r above a
# projection's size, bench past the model's context and with --steps 0, datasets whose labels are
# all truncated away, adapters of another model or holding NaN, and negative prices.
import json
import subprocess

import numpy as np
import pytest


def run(leantune_bin, *args):
    r = subprocess.run([leantune_bin, *map(str, args)], capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout + r.stderr


def refused(leantune_bin, *args, must_name=()):
    rc, out = run(leantune_bin, *args)
    assert rc > 0, f"exit {rc} (a negative code is a signal): {out[-2000:]}"
    for part in must_name:
        assert part in out, f"{part!r} not in: {out[-2000:]}"
    return out


@pytest.fixture(scope="module")
def stories(shared_dir):
    d = shared_dir / "models" / "stories260K"
    return d / "stories260K.bin", d / "tok512.bin"


@pytest.fixture(scope="module")
def train_args(stories, shared_dir):
    model, tok = stories
    return ["train", "--base-model", model, "--tokenizer", tok, "--datasets",
            shared_dir / "data" / "aesop_fables" / "aesop_fables.txt", "--threads", "1"]


@pytest.mark.parametrize("key,value,range_text", [
    ("lora_alpha", "0", "> 0"),
    ("weight_decay", "-0.1", ">= 0"),
    ("max_steps", "-1", ">= 0"),
    ("learning_rate", "0", "> 0"),
    ("learning_rate", "-1e-4", "> 0"),
    ("seed", "-1", ">= 0"),
    ("sequence_len", "-5", ">= 2"),
    ("micro_batch_size", "0", ">= 1"),
    ("gradient_accumulation_steps", "0", ">= 1"),
    ("lora_dropout", "1.5", "< 1"),
    ("threads", "10000", "<= 1024"),
])
def test_train_key_out_of_range(leantune_bin, train_args, tmp_path, key, value, range_text):
    refused(leantune_bin, *train_args, "--output-dir", tmp_path / "o", f"--{key}", value,
            must_name=(key, value, range_text))
    assert not (tmp_path / "o").exists()  # refused before anything was written


def test_warmup_beyond_max_steps(leantune_bin, train_args, tmp_path):
    refused(leantune_bin, *train_args, "--output-dir", tmp_path / "o", "--max-steps", "5", "--warmup-steps", "9",
            must_name=("warmup_steps", "9", "max_steps", "5"))


def test_duplicate_yaml_key_names_key_and_lines(leantune_bin, stories, tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"base_model: {stories[0]}\nlora_r: 8\nlearning_rate: 1e-4\nlora_r: 16\n")
    refused(leantune_bin, "train", cfg, must_name=(str(cfg), "'lora_r'", "line 2", "line 4"))


def test_unknown_yaml_key_suggests(leantune_bin, stories, tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"base_model: {stories[0]}\nlora_alpah: 16\n")
    refused(leantune_bin, "train", cfg, must_name=("line 2", "lora_alpah", "did you mean 'lora_alpha'"))


def test_context_beyond_the_model(leantune_bin, train_args, tmp_path):
    refused(leantune_bin, *train_args, "--output-dir", tmp_path / "o", "--sequence-len", "1024",
            must_name=("sequence_len", "1024", "512"))


def test_generate_threads_and_context(leantune_bin, stories):
    model, tok = stories
    refused(leantune_bin, "generate", "-m", model, "--tokenizer", tok, "--threads", "10000", "-n", "1",
            must_name=("threads", "10000", "1024"))
    refused(leantune_bin, "generate", "-m", model, "--tokenizer", tok, "--context", "100000", "-n", "1",
            must_name=("--context", "100000", "512"))
    refused(leantune_bin, "generate", "-m", model, "--tokenizer", tok, "--top-p", "1.5", "-n", "1",
            must_name=("--top-p", "1.5", "<= 1"))


def test_threads_above_hardware_warns_and_says_what_it_uses(leantune_bin, stories):
    import os
    hw = os.cpu_count()
    model, tok = stories
    rc, out = run(leantune_bin, "generate", "-m", model, "--tokenizer", tok, "--threads", hw + 1, "-n", "1", "-q")
    assert rc == 0, out
    assert "warning" in out and f"{hw + 1}" in out and "as asked" in out, out


def test_bench_train_steps_zero(leantune_bin, stories):
    refused(leantune_bin, "bench", "--train", "-m", stories[0], "--steps", "0", "--threads", "1",
            must_name=("--steps", "0", ">= 1"))


def test_bench_prompt_past_context(leantune_bin, stories):
    refused(leantune_bin, "bench", "-m", stories[0], "--prompt-tokens", "600", "--decode-tokens", "8",
            "--threads", "1", must_name=("--prompt-tokens 600", "608", "512"))


def test_lora_rank_above_projection(leantune_bin, stories):
    # stories260K: k_proj / v_proj are (out 32, in 64); train's default targets are q_proj, v_proj,
    # bench's all-linear (k_proj is the first of them that rank 40 exceeds)
    refused(leantune_bin, "plan", "--base-model", stories[0], "--lora-r", "40",
            must_name=("lora_r", "40", "v_proj", "(out 32, in 64)"))
    refused(leantune_bin, "bench", "--train", "-m", stories[0], "--lora-r", "40", "--threads", "1", "--steps", "1",
            must_name=("lora_r", "40", "k_proj", "(out 32, in 64)"))


def test_plan_negative_prices(leantune_bin, stories):
    refused(leantune_bin, "plan", "--base-model", stories[0], "--actuary", "--price-per-hour", "-2",
            must_name=("--price-per-hour", "-2", ">= 0"))
    refused(leantune_bin, "plan", "--base-model", stories[0], "--actuary", "--gpu-price", "-1",
            must_name=("--gpu-price", "-1", ">= 0"))
    refused(leantune_bin, "plan", "--base-model", stories[0], "--ranks", "3x", must_name=("--ranks", "3x"))


def test_dataset_truncated_to_no_labels(leantune_bin, stories, tmp_path):
    model, tok = stories
    data = tmp_path / "qa.jsonl"
    prompt = "Once upon a time there was a little fox who lived in the woods near the river. " * 4
    data.write_text("".join(json.dumps({"prompt": prompt, "completion": " The end."}) + "\n" for _ in range(6)))
    refused(leantune_bin, "train", "--base-model", model, "--tokenizer", tok, "--datasets", data,
            "--sample-packing", "false", "--sequence-len", "16", "--val-set-size", "0", "--threads", "1",
            "--output-dir", tmp_path / "o", must_name=(str(data), "sequence_len 16", "6 of 6 examples"))


# A tiny Hugging Face Llama folder (hidden 8, 2 layers, 2 heads, 1 key/value head, MLP 16) and
# PEFT adapters for it or for other shapes, written with numpy.
C, F, V = 8, 16, 32


def write_base(d, layers=2):
    from safetensors.numpy import save_file
    d.mkdir()
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": C, "intermediate_size": F,
           "num_hidden_layers": layers, "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": V,
           "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False}
    (d / "config.json").write_text(json.dumps(cfg))
    rng = np.random.default_rng(0)
    w = lambda *s: rng.standard_normal(s).astype(np.float32) * 0.1
    t = {"model.embed_tokens.weight": w(V, C), "model.norm.weight": np.ones(C, np.float32), "lm_head.weight": w(V, C)}
    for l in range(layers):
        p = f"model.layers.{l}."
        t.update({p + "input_layernorm.weight": np.ones(C, np.float32),
                  p + "post_attention_layernorm.weight": np.ones(C, np.float32),
                  p + "self_attn.q_proj.weight": w(C, C), p + "self_attn.k_proj.weight": w(4, C),
                  p + "self_attn.v_proj.weight": w(4, C), p + "self_attn.o_proj.weight": w(C, C),
                  p + "mlp.gate_proj.weight": w(F, C), p + "mlp.up_proj.weight": w(F, C),
                  p + "mlp.down_proj.weight": w(C, F)})
    save_file(t, str(d / "model.safetensors"), metadata={"format": "pt"})
    return d


def write_adapter(d, layers=2, hidden=C, value=0.01):
    from safetensors.numpy import save_file
    d.mkdir()
    r = 2
    (d / "adapter_config.json").write_text(json.dumps(
        {"peft_type": "LORA", "r": r, "lora_alpha": 4, "target_modules": ["q_proj"], "task_type": "CAUSAL_LM"}))
    t = {}
    for l in range(layers):
        p = f"base_model.model.model.layers.{l}.self_attn.q_proj."
        t[p + "lora_A.weight"] = np.full((r, hidden), value, np.float32)
        t[p + "lora_B.weight"] = np.full((hidden, r), 0.01, np.float32)
    save_file(t, str(d / "adapter_model.safetensors"), metadata={"format": "pt"})
    return d


def test_merge_refuses_an_adapter_of_another_model(leantune_bin, tmp_path):
    base = write_base(tmp_path / "base")
    ok = write_adapter(tmp_path / "ok")
    rc, out = run(leantune_bin, "merge", "-m", base, "--adapter", ok, "-o", tmp_path / "merged")
    assert rc == 0, out
    refused(leantune_bin, "merge", "-m", base, "--adapter", write_adapter(tmp_path / "deeper", layers=3),
            "-o", tmp_path / "m1", must_name=("layers.2.self_attn.q_proj.lora_A.weight", "2 layers"))
    refused(leantune_bin, "merge", "-m", base, "--adapter", write_adapter(tmp_path / "shallow", layers=1),
            "-o", tmp_path / "m2", must_name=("layers.1.self_attn.q_proj.lora_A.weight", "fewer layers"))
    refused(leantune_bin, "merge", "-m", base, "--adapter", write_adapter(tmp_path / "wider", hidden=12),
            "-o", tmp_path / "m3", must_name=("lora_A.weight", "[2, 12]", "[2, 8]"))
    refused(leantune_bin, "merge", "-m", base, "--adapter", write_adapter(tmp_path / "nan", value=np.nan),
            "-o", tmp_path / "m4", must_name=("lora_A.weight", "non-finite"))
    for m in ("m1", "m2", "m3", "m4"):
        assert not (tmp_path / m / "model.safetensors").exists()


def test_plan_of_a_model_too_large_for_64_bits(leantune_bin, tmp_path):
    # int-sized dimensions: vocabulary x hidden size x 4 bytes alone passes 2^64
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2 ** 30,
           "intermediate_size": 2 ** 31 - 1, "num_hidden_layers": 2, "num_attention_heads": 2 ** 20,
           "num_key_value_heads": 2 ** 20, "head_dim": 2 ** 10, "vocab_size": 2 ** 31 - 1,
           "max_position_embeddings": 4096}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    out = refused(leantune_bin, "plan", "--base_model", tmp_path, "--method", "full", "--sequence_len", "16",
                  "--micro_batch_size", "1", must_name=("configuration is too large", "2^62"))
    assert "e+" in out  # the size is stated, not a wrapped small number

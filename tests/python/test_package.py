# The Python package `leantune` (pip install .; python/leantune over python/src), used as a user
# would: load stories260K, generate (whole and streamed), logits equal to `leantune logits` bit for
# bit, train 20 LoRA steps on Aesop's fables with a metrics callback (the losses equal `leantune
# train`'s), plan, merge, quantize, errors as leantune.Error, Ctrl-C between steps leaving the last
# checkpoint whole. Skipped when the package is not installed in this Python (scripts/test.sh
# installs it into .venv; scripts/python_package.sh checks a fresh virtual environment).
import json
import math
import os
import pathlib
import signal
import subprocess
import threading
import time

import numpy as np
import pytest

leantune = pytest.importorskip("leantune", reason="the leantune package is not installed in this Python "
                                                  "(pip install . from the repository root)")

STORIES = "models/stories260K"
AESOP = "data/aesop_fables/aesop_fables.txt"


@pytest.fixture(scope="module")
def shared(shared_dir):
    if not (shared_dir / STORIES / "stories260K.bin").exists():
        pytest.fail(f"{shared_dir / STORIES} is missing (set LEANTUNE_SHARED)")
    return shared_dir


@pytest.fixture(scope="module")
def model(shared):
    return leantune.load(shared / STORIES, threads=2)


def lora_config(shared, out, **over):
    c = {"base_model": str(shared / STORIES / "stories260K.bin"), "tokenizer": str(shared / STORIES / "tok512.bin"),
         "datasets": [{"path": str(shared / AESOP), "min_blank_lines": 2}], "val_set_size": 0.05,
         "method": "lora", "lora_r": 8, "lora_alpha": 16, "lora_target_modules": "all-linear",
         "micro_batch_size": 4, "sequence_len": 128, "learning_rate": 3e-3, "warmup_steps": 2, "max_steps": 20,
         "eval_steps": 10, "save_steps": 10, "logging_steps": 5, "eval_batches": 2, "threads": 2,
         "output_dir": str(out)}
    c.update(over)
    return c


def cli(leantune_bin, *args):
    r = subprocess.run([leantune_bin, *map(str, args)], capture_output=True, text=True,
                       env={**os.environ, "OMP_NUM_THREADS": "2"})
    assert r.returncode == 0, r.stderr
    return r.stdout


# ---- load, tokenize, generate

def test_load_finds_the_llama2c_checkpoint_and_tokenizer_in_a_folder(model, shared):
    assert model.path.endswith("stories260K.bin")
    assert model.tokenizer.path.endswith("tok512.bin")
    assert model.config["dim"] == 64 and model.config["n_layers"] == 5 and model.config["vocab_size"] == 512
    assert model.parameter_count > 200_000
    ids = model.tokenizer.encode("Once upon a time")
    assert ids[0] == model.tokenizer.bos_id == 1
    assert model.tokenizer.decode(ids, skip_special=True) == "Once upon a time"
    assert "stories260K" in repr(model)


def test_generate_equals_the_cli(model, shared, leantune_bin):
    got = model.generate("Once upon a time", max_tokens=40, temperature=0)
    want = cli(leantune_bin, "generate", "--model", shared / STORIES / "stories260K.bin", "--tokenizer",
               shared / STORIES / "tok512.bin", "--prompt", "Once upon a time", "--temperature", "0",
               "--max-new-tokens", "40", "--threads", "2", "--quiet")
    assert len(got) > 40
    assert "Once upon a time" + got + "\n" == want
    sampled = model.generate("Once upon a time", max_tokens=40, temperature=0.9, top_p=0.9, seed=7)
    assert sampled == model.generate("Once upon a time", max_tokens=40, temperature=0.9, top_p=0.9, seed=7)


def test_stream_yields_the_same_text_and_can_be_stopped(model):
    whole = model.generate("A little dog", max_tokens=50, temperature=0, details=True)
    stream = model.generate("A little dog", max_tokens=50, temperature=0, stream=True)
    pieces = list(stream)
    assert len(pieces) > 5 and "".join(pieces) == whole["text"]
    assert stream.result["output_ids"] == whole["output_ids"] and stream.result["stop_reason"] == whole["stop_reason"]
    with model.generate("A little dog", max_tokens=200, temperature=0, stream=True, stop_at_eos=False) as s:
        first = next(iter(s))
    assert first
    rest = list(s)  # after close() the generation ends within a token; it ran at most AHEAD pieces ahead
    assert s.result["stop_reason"] == "cancelled", s.result
    assert len(s.result["output_ids"]) <= leantune.TextStream.AHEAD + 3 and len(rest) <= leantune.TextStream.AHEAD + 2


def test_the_gil_is_released_while_the_engine_computes(model):
    # The main thread ticks (which needs the GIL) every millisecond while a worker runs generate
    # calls. A call that held the GIL would let only a tick or a few land inside its span (at the
    # hand-overs where it starts and ends: a GIL-holding C loop of 20-40 ms saw 1-5); one that lets
    # go of it sees ticks all along (~0.7 a millisecond here, with both cores busy). So: one call
    # with at least 5 ticks inside and at least one per 3 ms of its span. The worker calls until
    # one does (at most 20 calls), so the check does not depend on how fast the machine is.
    spans, ticks, done = [], [], threading.Event()

    def passes(a, b):
        n = sum(1 for x in ticks if a < x < b)
        return n >= 5 and n >= (b - a) * 1000 / 3

    def seen():
        return any(passes(a, b) for a, b in spans)

    def work():
        for _ in range(20):
            a = time.monotonic()
            model.generate("Once upon a time", max_tokens=400, temperature=0, stop_at_eos=False, context=512)
            spans.append((a, time.monotonic()))
            if done.is_set():
                return

    t = threading.Thread(target=work)
    t.start()
    while t.is_alive():
        ticks.append(time.monotonic())
        if len(ticks) % 20 == 0 and seen():
            done.set()
        time.sleep(0.001)
    t.join()
    assert seen(), [(round((b - a) * 1000, 1), sum(1 for x in ticks if a < x < b)) for a, b in spans]


def test_generate_stops_at_a_stop_string_and_takes_ids(model):
    ids = model.tokenizer.encode("Once upon a time")
    r = model.generate(ids, max_tokens=100, temperature=0, stop=".", details=True)
    assert r["stop_reason"] == "stop_string" and "." not in r["text"] and r["prompt_ids"] == ids


def test_chat_templates(model, tmp_path):
    tok = model.tokenizer
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}]
    assert not tok.has_chat_template
    with pytest.raises(leantune.Error, match="template"):
        tok.apply_chat_template(chat)
    text = tok.apply_chat_template(chat, chat_template="chatml", tokenize=False, add_generation_prompt=True)
    assert text == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
                    "<|im_start|>assistant\n")
    # a built-in template's text is encoded after BOS, as training encodes it
    assert tok.apply_chat_template(chat, chat_template="chatml", add_generation_prompt=True) == tok.encode(text)
    # a template file: messages with any keys, tools, template variables, whitespace control
    (tmp_path / "t.jinja").write_text(
        "{%- for m in messages %}[{{ m.role | upper }}{% if m.name %}:{{ m.name }}{% endif %}] {{ m.content }}\n"
        "{%- endfor %}{% if tools %}tools={{ tools | length }} {{ tools[0].function.name }}{% endif %}"
        "{{ ' thinking' if enable_thinking else '' }}{% if add_generation_prompt %} >{% endif %}")
    tools = [{"type": "function", "function": {"name": "add", "parameters": {}}}]
    got = tok.apply_chat_template([*chat, {"role": "tool", "name": "add", "content": "4"}], tools=tools,
                                  chat_template=str(tmp_path / "t.jinja"), tokenize=False,
                                  add_generation_prompt=True, enable_thinking=True)
    assert got == "[SYSTEM] Be brief.[USER] Hi![TOOL:add] 4tools=1 add thinking >"
    (tmp_path / "bad.jinja").write_text("line one\n{% for m in messages %}{{ m.content }}\n{% endwhile %}")
    with pytest.raises(leantune.Error, match="line 3"):
        tok.apply_chat_template(chat, chat_template=str(tmp_path / "bad.jinja"), tokenize=False)
    # chat(): the template's ids, then generate from them
    answer = model.chat([{"role": "user", "content": "Once upon a time"}], max_tokens=10, temperature=0,
                        chat_template="chatml", details=True)
    assert answer["prompt_ids"] == tok.apply_chat_template([{"role": "user", "content": "Once upon a time"}],
                                                           chat_template="chatml", add_generation_prompt=True)


# ---- logits: the CLI's bits, no copy

def test_logits_equal_the_cli_bit_for_bit(model, shared, leantune_bin, tmp_path):
    ids = model.tokenizer.encode("Once upon a time there was a little girl")
    decode = [403, 261, 3, 77]
    cli(leantune_bin, "logits", "--model", shared / STORIES / "stories260K.bin", "--ids", ",".join(map(str, ids)),
        "--decode", ",".join(map(str, decode)), "--threads", "2", "--out", tmp_path / "l.f32")
    want = np.fromfile(tmp_path / "l.f32", dtype="<f4").reshape(1 + len(decode), 512)
    rows = model.logits(ids, decode)
    assert rows.shape == want.shape and rows.dtype == np.float32
    np.testing.assert_array_equal(rows.view(np.uint32), want.view(np.uint32))
    one = model.logits(ids)
    assert one.shape == (512,)
    np.testing.assert_array_equal(one.view(np.uint32), want[0].view(np.uint32))
    # the array is a view of the engine's buffer, kept alive by the array itself
    for a in (one, rows):
        assert not a.flags.owndata and a.base is not None and a.flags.writeable
    np.testing.assert_array_equal(model.logits(np.array(ids, dtype=np.int64)), one)


# ---- errors

def test_engine_errors_are_leantune_error_with_the_engines_message(shared, tmp_path):
    with pytest.raises(leantune.Error, match="no-such-model"):
        leantune.load(tmp_path / "no-such-model.bin", tokenizer=shared / STORIES / "tok512.bin")
    assert issubclass(leantune.Error, RuntimeError)
    with pytest.raises(leantune.Error, match="lora_rank"):
        leantune.plan(lora_config(shared, tmp_path / "o", lora_rank=8))
    model = leantune.load(shared / STORIES)
    with pytest.raises(leantune.Error, match="512"):
        model.logits([1, 512])
    with pytest.raises(leantune.Error, match="weights"):
        leantune.load(shared / STORIES, weights="q3")
    with pytest.raises(leantune.Error, match="q8_0"):  # llama.cpp's arithmetic needs its block weights
        leantune.load(shared / STORIES, llama_cpp_numerics=True)


def test_a_callback_exception_reaches_the_caller(shared, tmp_path):
    def callback(record):
        if record.get("step") == 3:
            raise ValueError("from the callback")
    with pytest.raises(ValueError, match="from the callback"):
        leantune.train(lora_config(shared, tmp_path / "out", max_steps=8, save_steps=2, sequence_len=64),
                       callback=callback)
    assert (tmp_path / "out" / "LATEST").read_text().strip() == "checkpoint-2"


# ---- train, plan, merge, quantize

def test_train_20_lora_steps_with_callbacks_equals_the_cli(shared, leantune_bin, tmp_path):
    records, seen_threads = [], set()

    def callback(record):
        records.append(record)
        seen_threads.add(threading.get_ident())

    r = leantune.train(lora_config(shared, tmp_path / "py"), callback=callback)
    steps = [x for x in records if "loss" in x]
    evals = [x for x in records if "eval_loss" in x]
    assert [x["step"] for x in steps] == list(range(1, 21))
    assert [x["step"] for x in evals] == [0, 10, 20]
    assert seen_threads == {threading.get_ident()}  # the engine runs the run on the calling thread
    assert r.steps == 20 and len(r.losses) == 20 and r.losses == pytest.approx([x["loss"] for x in steps])
    assert r.last_eval_loss < r.first_eval_loss - 0.3, r.eval_losses
    assert r.metrics["eval_loss"] == r.last_eval_loss and r.metrics["step"] == 20
    assert r.adapter and (pathlib.Path(r.adapter) / "adapter_model.safetensors").exists()
    assert r.report and r.ledger and r.checkpoint.endswith("checkpoint-20") and r.model is None
    assert [json.loads(x) for x in pathlib.Path(r.metrics_file).read_text().splitlines()] == records
    # the same run from the CLI: the same records (the engine's bits), timing fields aside
    (tmp_path / "cli.yaml").write_text(json.dumps(lora_config(shared, tmp_path / "cli")))
    cli(leantune_bin, "train", tmp_path / "cli.yaml")
    theirs = [json.loads(x) for x in (tmp_path / "cli" / "metrics.jsonl").read_text().splitlines()]
    strip = lambda rs: [{k: v for k, v in x.items() if k not in ("tokens_per_s", "rss_bytes")} for x in rs]
    assert strip(records) == strip(theirs)
    # a finished run's folder is refused; resume="auto" finds nothing left to do
    with pytest.raises(leantune.Error, match="output_dir"):
        leantune.train(lora_config(shared, tmp_path / "py"), progress=False, verbose=False)


def test_train_progress_bar_from_a_yaml_file_with_overrides(shared, tmp_path, capsys):
    pytest.importorskip("tqdm")
    path = tmp_path / "run.yaml"
    path.write_text(json.dumps(lora_config(shared, tmp_path / "out", max_steps=50)))
    r = leantune.train(path, max_steps=4, eval_steps=4, save_steps=4, sequence_len=64)
    assert r.steps == 4
    err = capsys.readouterr().err
    assert "4/4" in err and "loss=" in err


def test_ctrl_c_stops_between_steps_and_the_run_resumes(shared, tmp_path):
    config = lora_config(shared, tmp_path / "out", max_steps=12, save_steps=4, eval_steps=12, sequence_len=64)
    interrupted = threading.Event()

    def callback(record):
        if record.get("step") == 5 and "loss" in record:  # Ctrl-C soon, while the engine computes step 6
            threading.Timer(0.05, lambda: (interrupted.set(), os.kill(os.getpid(), signal.SIGINT))).start()
        if record.get("step") == 7 and "loss" in record and not interrupted.is_set():
            time.sleep(2)  # a fast machine: the signal arrives here at the latest, before step 8's checkpoint

    with pytest.raises(KeyboardInterrupt) as e:
        leantune.train(config, callback=callback)
    assert interrupted.is_set()
    assert any("checkpoint-4" in n for n in getattr(e.value, "__notes__", [])), e.value
    out = tmp_path / "out"
    assert (out / "LATEST").read_text().strip() == "checkpoint-4"
    assert (out / "checkpoint-4" / "trainer_state.json").exists() and not (out / "adapter").exists()
    records = []
    r = leantune.train(config, callback=records.append, resume="auto")
    assert r.steps == 12 and [x["step"] for x in records if "loss" in x] == list(range(5, 13))
    assert (out / "adapter").exists()


def stories_as_hf_folder(shared, folder):
    """stories260K.bin rewritten as a Hugging Face Llama folder (q/k rows from llama2.c's interleaved
    rotary pairs to HF's halves), with numpy alone."""
    raw = (shared / STORIES / "stories260K.bin").read_bytes()
    C, F, L, H, KV, V, S = np.frombuffer(raw, np.int32, 7)
    w = np.frombuffer(raw, np.float32, offset=28)
    hd, p, t = C // H, 0, {}

    def take(*shape):
        nonlocal p
        n = int(np.prod(shape))
        a = w[p:p + n].reshape(shape)
        p += n
        return a

    def halves(a, heads):  # per head: pairs (2i, 2i+1) -> (i, i + hd/2)
        return a.reshape(heads, hd // 2, 2, C).swapaxes(1, 2).reshape(a.shape)

    t["model.embed_tokens.weight"] = take(V, C)
    att, q, k, v, o = take(L, C), take(L, C, C), take(L, KV * hd, C), take(L, KV * hd, C), take(L, C, C)
    ffn, gate, down, up = take(L, C), take(L, F, C), take(L, C, F), take(L, F, C)
    t["model.norm.weight"] = take(C)
    for l in range(L):
        pre = f"model.layers.{l}."
        t.update({pre + "input_layernorm.weight": att[l], pre + "post_attention_layernorm.weight": ffn[l],
                  pre + "self_attn.q_proj.weight": halves(q[l], H), pre + "self_attn.k_proj.weight": halves(k[l], KV),
                  pre + "self_attn.v_proj.weight": v[l], pre + "self_attn.o_proj.weight": o[l],
                  pre + "mlp.gate_proj.weight": gate[l], pre + "mlp.down_proj.weight": down[l],
                  pre + "mlp.up_proj.weight": up[l]})
    folder.mkdir()
    header, blobs, off = {}, [], 0
    for name, a in t.items():
        b = np.ascontiguousarray(a, "<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    (folder / "model.safetensors").write_bytes(len(h).to_bytes(8, "little") + h + b"".join(blobs))
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": int(C), "intermediate_size": int(F),
        "num_hidden_layers": int(L), "num_attention_heads": int(H), "num_key_value_heads": int(KV),
        "vocab_size": int(V), "max_position_embeddings": int(S), "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"}))
    return folder


def test_plan_merge_and_quantize(shared, model, leantune_bin, tmp_path):
    tok = shared / STORIES / "tok512.bin"
    hf = stories_as_hf_folder(shared, tmp_path / "stories-hf")
    ids = model.tokenizer.encode("Once upon a time there was")
    base = leantune.load(hf, tokenizer=tok, threads=2)
    np.testing.assert_allclose(base.logits(ids), model.logits(ids), atol=1e-4)  # the rewrite is the same model
    config = lora_config(shared, tmp_path / "lora", base_model=str(hf), max_steps=6, save_steps=6, eval_steps=6)
    # plan: what `leantune plan --json` says for the same config
    p = leantune.plan(config)
    (tmp_path / "c.yaml").write_text(json.dumps(config))
    want = json.loads(cli(leantune_bin, "plan", tmp_path / "c.yaml", "--json"))
    measured = ("data", "baseline")  # resident bytes measured in each process
    arenas = lambda plan: {k: v for k, v in plan["categories"].items() if k not in measured}
    assert arenas(p) == arenas(want) and p["arena_bytes"] == want["arena_bytes"]
    assert p["data_bytes"] > 0 and p["method"] == "lora" and p["lora_r"] == 8
    assert p["predicted_peak_bytes"] == p["arena_bytes"] + p["data_bytes"] + p["baseline_bytes"]
    assert {b["category"] for b in p["buffers"]} >= {"trainable_params", "gradients", "optimizer_state"}
    assert "total" in p["table"]
    inf = leantune.plan_inference(hf, context=128)
    assert inf["context"] == 128 and inf["arena_bytes"] > 0
    # merge: the merged folder computes what the base with the adapter computes
    r = leantune.train(config, progress=False, verbose=False)
    merged = leantune.merge(hf, r.adapter, tmp_path / "merged")
    with_adapter = leantune.load(hf, tokenizer=tok, adapter=r.adapter, threads=2).logits(ids)
    got = leantune.load(merged, tokenizer=tok, threads=2).logits(ids)
    assert np.abs(with_adapter - base.logits(ids)).max() > 1e-2  # the adapter changed the model
    np.testing.assert_allclose(got, with_adapter, atol=1e-5)
    # quantize: an NF4 folder loads and generates
    q = leantune.quantize(hf, tmp_path / "nf4", "nf4")
    qm = leantune.load(q, tokenizer=tok, threads=2)
    assert qm.config["quantization"] == "nf4" and qm.generate("Once", max_tokens=5, temperature=0)


def test_a_repo_id_loads_from_the_hugging_face_cache(shared, model, tmp_path, monkeypatch):
    repo = tmp_path / "hub" / "models--tiny--stories"
    snap = stories_as_hf_folder(shared, tmp_path / "snap")
    (repo / "snapshots").mkdir(parents=True)
    snap.rename(repo / "snapshots" / "abc123")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    ids = model.tokenizer.encode("Once upon a time")
    m = leantune.load("tiny/stories", tokenizer=shared / STORIES / "tok512.bin", threads=2)
    np.testing.assert_allclose(m.logits(ids), model.logits(ids), atol=1e-4)
    with pytest.raises(leantune.Error, match="tiny/missing"):
        leantune.load("tiny/missing", tokenizer=shared / STORIES / "tok512.bin")


def test_stubs_name_what_the_module_defines():
    import ast
    from leantune import _native
    stub = ast.parse((pathlib.Path(leantune.__file__).parent / "_native.pyi").read_text())
    declared = {n.name for n in stub.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    defined = {n for n in dir(_native) if not n.startswith("_")}
    assert declared == defined
    for cls in stub.body:
        if isinstance(cls, ast.ClassDef) and cls.name != "Error":
            members = {n.name for n in cls.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("__")}
            members |= {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign)}
            real = {n for n in dir(getattr(_native, cls.name)) if not n.startswith("_")}
            assert members == real, cls.name
    assert (pathlib.Path(leantune.__file__).parent / "py.typed").exists()


def test_the_quickstart_example_runs(shared, tmp_path):
    import sys
    root = pathlib.Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, str(root / "examples" / "quickstart.py")], capture_output=True, text=True,
                       cwd=root, timeout=900, env={**os.environ, "LEANTUNE_SHARED": str(shared),
                                                   "LEANTUNE_OUT": str(tmp_path / "out"), "OMP_NUM_THREADS": "2"})
    assert r.returncode == 0, r.stdout + r.stderr
    held = [line for line in r.stdout.splitlines() if line.startswith("held-out loss")]
    assert held and "leantune.Error: <config dict>" in r.stdout and "lora_rank" in r.stdout
    assert (tmp_path / "out" / "adapter").is_dir() and (tmp_path / "out" / "report.html").exists()

# `leantune plan --serve` is what `leantune serve` allocates: the engine's bytes (KV pools and batch
# buffers) and KV blocks of the plan equal the running server's /metrics, for the default pool
# (concurrency x beams full contexts), a --kv-memory pool, and with a draft model; the KV cache
# grows linearly with concurrency, beams and context.
import json
import subprocess

import pytest

from test_gguf_export import byte_level_tokenizer
from test_model_parity import build
from test_server import Server


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("plan_serve")
    build("llama3", seed=1).save_pretrained(root / "m", safe_serialization=True)
    byte_level_tokenizer(root / "m", 300)
    return root / "m"


def plan(leantune_bin, model, *flags):
    r = subprocess.run([leantune_bin, "plan", "--serve", "--model", str(model), *flags, "--json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("plan_flags,serve_flags", [
    (["--concurrency", "4", "--beams", "2", "--context", "256"], ["--max-seqs", "8", "--context", "256"]),
    (["--max-seqs", "16", "--context", "128", "--kv-memory", "0.5", "--block-size", "8"],
     ["--max-seqs", "16", "--context", "128", "--kv-memory", "0.5", "--block-size", "8"]),
    (["--max-seqs", "4", "--context", "64", "--draft-model", "{m}", "--num-speculative-tokens", "3"],
     ["--max-seqs", "4", "--context", "64", "--draft-model", "{m}", "--num-speculative-tokens", "3"]),
])
def test_plan_equals_what_serve_allocates(leantune_bin, folder, plan_flags, serve_flags):
    plan_flags = [f.format(m=folder) for f in plan_flags]
    serve_flags = [f.format(m=folder) for f in serve_flags]
    p = plan(leantune_bin, folder, *plan_flags)
    srv = Server(leantune_bin, "--model", str(folder), *serve_flags)
    try:
        assert srv.metric("leantune_engine_bytes") == p["engine_bytes"]
        assert srv.metric("leantune_kv_blocks") == p["kv_blocks"]
    finally:
        srv.close()


def test_kv_grows_with_concurrency_beams_and_context(leantune_bin, folder):
    kv = {}
    for c, k, ctx in [(1, 1, 128), (4, 1, 128), (4, 3, 128), (4, 3, 256)]:
        p = plan(leantune_bin, folder, "--concurrency", str(c), "--beams", str(k), "--context", str(ctx))
        kv[(c, k, ctx)] = p["categories"]["kv_cache"]
        assert p["kv_blocks"] == c * k * ctx // 16
    assert kv[(4, 1, 128)] == 4 * kv[(1, 1, 128)]
    assert kv[(4, 3, 128)] == 3 * kv[(4, 1, 128)]
    assert kv[(4, 3, 256)] == 2 * kv[(4, 3, 128)]
    text = subprocess.run([leantune_bin, "plan", "--serve", "--model", str(folder), "--concurrency", "2",
                           "--adapter-memory", "4", "--buffers"], capture_output=True, text=True, timeout=60)
    assert text.returncode == 0, text.stderr
    assert "serving plan" in text.stdout and "kv_pool.k" in text.stdout and "adapters.resident" in text.stdout


def test_plan_counts_speculation_buffers(leantune_bin, folder):
    """With a draft model the plan holds, per running sequence, K rows of V floats (each sampled
    proposal's draft distribution), plus the model's p and the draft's processed logits."""
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    ws = {}
    for k in (1, 3):
        p = plan(leantune_bin, folder, "--max-seqs", "4", "--context", "64", "--draft-model", str(folder),
                 "--num-speculative-tokens", str(k))
        ws[k] = p["categories"]["workspace"]
    assert ws[3] - ws[1] == 4 * 2 * vocab * 4
    no_draft = plan(leantune_bin, folder, "--max-seqs", "4", "--context", "64")
    text = subprocess.run([leantune_bin, "plan", "--serve", "--model", str(folder), "--max-seqs", "4", "--context", "64",
                           "--draft-model", str(folder), "--num-speculative-tokens", "3", "--buffers"],
                          capture_output=True, text=True, timeout=60)
    assert text.returncode == 0, text.stderr
    assert "spec.q" in text.stdout and "spec.p" in text.stdout and "spec.scratch" in text.stdout
    assert "spec.q" not in json.dumps(no_draft)

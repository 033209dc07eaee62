# Speculative decoding (`--draft-model`, `--num-speculative-tokens`) in `leantune generate` and
# `leantune serve`: greedy output is token for token the output without the draft, whatever the
# draft (the model with noise on its weights: some proposals accepted; an unrelated random model: few;
# the model itself: all) and
# K; sampled requests run rejection sampling (their distribution is tested in
# tests/infer/test_spec_sampling.cpp): a seed gives the same tokens alone and under load, and again; the
# acceptance rate is in /metrics and on generate's stderr.
import concurrent.futures
import re
import subprocess

import pytest
import torch

from test_gguf_export import byte_level_tokenizer
from test_model_parity import build
from test_server import Server


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("spec")
    target = build("llama3", seed=5)
    with torch.no_grad():
        target.lm_head.weight.mul_(8)  # peaked distributions: greedy runs a draft can follow
    target.save_pretrained(root / "target", safe_serialization=True)
    tok = byte_level_tokenizer(root / "target", 300)
    noisy = build("llama3", seed=5)  # the model with noise on every weight: a draft that is often right
    torch.manual_seed(1)
    with torch.no_grad():
        noisy.lm_head.weight.mul_(8)
        for p in noisy.parameters():
            p.add_(torch.randn_like(p) * p.std() * 0.05)
    noisy.save_pretrained(root / "noisy", safe_serialization=True)
    build("llama3", seed=9).save_pretrained(root / "unrelated", safe_serialization=True)
    for d in ("noisy", "unrelated"):
        (root / d / "tokenizer.json").write_text((root / "target" / "tokenizer.json").read_text())
    return root, tok


def generate(leantune_bin, root, ids, n, *extra, temperature="0"):
    r = subprocess.run([leantune_bin, "generate", "-m", str(root / "target"), "--prompt-ids", ",".join(map(str, ids)),
                        "-n", str(n), "--temperature", temperature, "--ignore-eos", "-t", "2", *extra],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.rstrip("\n"), r.stderr


@pytest.mark.parametrize("draft,k", [("noisy", 1), ("noisy", 4), ("unrelated", 3), ("target", 6)])
def test_generate_with_a_draft_is_greedy(leantune_bin, models, draft, k):
    root, _ = models
    for ids in ([1, 17, 42, 99, 5], [1, 250, 3, 77, 8, 8, 120]):
        want, _ = generate(leantune_bin, root, ids, 50)
        got, err = generate(leantune_bin, root, ids, 50, "--draft-model", str(root / draft),
                            "--num-speculative-tokens", str(k))
        assert got == want
        m = re.search(r"speculative: (\d+) of (\d+) draft tokens accepted", err)
        assert m, err
        accepted, proposed = int(m.group(1)), int(m.group(2))
        assert proposed > 0 and accepted <= proposed
        if draft == "target":
            assert accepted >= proposed - k  # the model itself: all but the last round's
        if draft == "noisy":
            assert 0 < accepted < proposed  # some accepted, some rejected
        print(f"{draft} K={k}: {accepted}/{proposed} accepted")


def test_generate_sampled_with_a_draft_is_seeded(leantune_bin, models):
    root, _ = models
    ids = [1, 17, 42, 99, 5]
    args = ["--top-p", "0.95", "--repetition-penalty", "1.2", "--draft-model", str(root / "noisy"),
            "--num-speculative-tokens", "3"]
    a, err = generate(leantune_bin, root, ids, 40, *args, "--seed", "7", temperature="0.9")
    assert a == generate(leantune_bin, root, ids, 40, *args, "--seed", "7", temperature="0.9")[0]
    assert a != generate(leantune_bin, root, ids, 40, *args, "--seed", "8", temperature="0.9")[0]
    m = re.search(r"speculative: (\d+) of (\d+) draft tokens accepted", err)
    assert m and 0 < int(m.group(1)) <= int(m.group(2)), err


def test_serve_with_a_draft(models, leantune_bin):
    root, tok = models
    args = ["--model", str(root / "target"), "--served-model-name", "m", "--context", "128", "--max-seqs", "16",
            "--block-size", "4"]
    prompts = [[1, 17, 42, 99, 5], [1, 250, 3, 77], [1, 8, 8, 120, 64, 33, 12], "The quick brown fox", "a little cat"]
    jobs = [(p, t, 20 + 7 * i) for i, (p, t) in enumerate((p, t) for p in prompts for t in (0.0, 0.0, 1.0))]

    def run(srv, job):
        p, t, n = job
        r = srv.client.completions.create(model="m", prompt=p, max_tokens=n, temperature=t, seed=3,
                                          extra_body={"ignore_eos": True})
        return r.choices[0].text

    plain = Server(leantune_bin, *args)
    spec = Server(leantune_bin, *args, "--draft-model", str(root / "noisy"), "--num-speculative-tokens", "3")
    try:
        want = [run(plain, j) for j in jobs]
        alone = [run(spec, j) for j in jobs]
        with concurrent.futures.ThreadPoolExecutor(len(jobs)) as ex:
            together = list(ex.map(lambda j: run(spec, j), jobs))
        assert together == alone  # greedy and seeded sampling: the load changes nothing
        for (_, t, _), w, got in zip(jobs, want, alone):
            if t == 0:
                assert got == w  # greedy: the output without the draft
        assert [run(spec, j) for j in jobs[:3]] == alone[:3]  # and again (prefix cache hits now)
        assert plain.metric("leantune_spec_draft_tokens_total") == 0
        proposed = spec.metric("leantune_spec_draft_tokens_total")
        rate = spec.metric("leantune_spec_acceptance_rate")
        assert proposed > 0 and 0 < rate <= 1
        assert rate == pytest.approx(spec.metric("leantune_spec_accepted_tokens_total") / proposed, rel=1e-4)
        assert spec.metric("leantune_kv_blocks_in_use") == 0
        sampled = [i for i, (_, t, _) in enumerate(jobs) if t > 0]
        assert any(alone[i] != want[i] for i in sampled)  # sampled requests now go through the draft
        print(f"serve: acceptance {rate:.3f} of {proposed:.0f} draft tokens")
    finally:
        plain.close()
        spec.close()

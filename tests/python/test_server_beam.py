# Beam search in the engine (`leantune serve` with use_beam_search / num_beams, `leantune generate
# --num-beams`) equals transformers' generate(num_beams=K, do_sample=False, length_penalty=...,
# early_stopping=...) on a random HF Llama model: the same hypotheses in the same order, for each
# early-stopping rule and several length penalties, with an EOS id that the beams do reach (a
# token the model likes, given as stop_token_ids), and without EOS (max_length only). Beam searches
# running among greedy requests, and through a pool small enough to preempt them, give the same.
import concurrent.futures
import json
import subprocess

import pytest
import torch

from test_gguf_export import byte_level_tokenizer
from test_model_parity import build
from test_server import Server


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    root = tmp_path_factory.mktemp("beam")
    model = build("llama3", seed=5).eval()
    model.save_pretrained(root / "base", safe_serialization=True)
    tok = byte_level_tokenizer(root / "base", 300)
    return root / "base", model, tok


@pytest.fixture
def server(leantune_bin, llama):
    s = Server(leantune_bin, "--model", str(llama[0]), "--served-model-name", "base", "--context", "128",
               "--max-seqs", "16")
    yield s
    s.close()


def hf_beams(model, ids, k, n, max_new, eos, lp=1.0, es=False):
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), num_beams=k, num_return_sequences=n, do_sample=False,
                             max_new_tokens=max_new, length_penalty=lp, early_stopping=es, eos_token_id=eos,
                             pad_token_id=eos if eos is not None else 0, output_scores=True,
                             return_dict_in_generate=True)
    hyps = []
    for row in out.sequences[:, len(ids):].tolist():
        if eos is not None and eos in row:
            row = row[:row.index(eos)]
        hyps.append(row)
    return hyps, out.sequences_scores.tolist()


PROMPT_IDS = [[1, 17, 42, 99, 5], [1, 250, 3, 77], [1, 8, 8, 120, 64, 33, 12]]


def frequent_token(model, ids):
    """A token the beams reach early: the 3rd token of the best eos-free hypothesis."""
    hyps, _ = hf_beams(model, ids, 4, 1, 6, None)
    return hyps[0][2]


def ask(srv, ids, k, n, max_new, eos, lp=1.0, es=False):
    extra = {"use_beam_search": True, "best_of": k, "length_penalty": lp, "early_stopping": es, "ignore_eos": True}
    if eos is not None:
        extra["stop_token_ids"] = [eos]
    r = srv.client.completions.create(model="base", prompt=ids, max_tokens=max_new, n=n, temperature=0,
                                      extra_body=extra)
    return [c.text for c in r.choices]


def test_beam_search_equals_transformers(server, llama):
    _, model, tok = llama
    cases = 0
    for ids in PROMPT_IDS:
        eos = frequent_token(model, ids)
        lengths = []
        for k, n, lp, es in [(4, 4, 1.0, False), (3, 2, 2.0, True), (4, 3, -0.5, "never"), (2, 2, 0.0, False),
                             (5, 5, 1.5, "never"), (4, 1, 1.0, True)]:
            want, _ = hf_beams(model, ids, k, n, 14, eos, lp, es)
            got = ask(server, ids, k, n, 14, eos, lp, es)
            assert got == [tok.decode(h) for h in want], (ids, k, n, lp, es, want)
            cases += 1
            lengths += [len(h) for h in want]
        assert min(lengths) < 14 and max(lengths) == 14, "the hypotheses should end both ways (EOS and max_length)"
        # no EOS: max_length only
        want, _ = hf_beams(model, ids, 4, 2, 10, None)
        assert ask(server, ids, 4, 2, 10, None) == [tok.decode(h) for h in want]
    assert cases == 18


def test_generate_num_beams_cli(leantune_bin, llama, tmp_path):
    path, model, _ = llama
    ids = PROMPT_IDS[0]
    want, scores = hf_beams(model, ids, 4, 3, 12, None, 1.3, "never")
    out = tmp_path / "ids.txt"
    r = subprocess.run([leantune_bin, "generate", "-m", str(path), "--prompt-ids", ",".join(map(str, ids)), "-n", "12",
                        "--num-beams", "4", "--num-return-sequences", "3", "--length-penalty", "1.3",
                        "--early-stopping", "never", "--ignore-eos", "--ids-out", str(out), "-t", "2"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    got = [[int(x) for x in line.split(",")] for line in out.read_text().splitlines()]
    assert got == want
    got_scores = [float(line.split("beam score ")[1].split(" ")[0]) for line in r.stderr.splitlines()
                  if "beam score" in line]
    assert got_scores == pytest.approx(scores, abs=2e-4)


def test_beams_among_greedy_requests_and_preempted(leantune_bin, llama):
    path, model, tok = llama
    jobs = [("beam", ids) for ids in PROMPT_IDS] + [("greedy", ids) for ids in PROMPT_IDS * 3]

    def run(srv, job):
        kind, ids = job
        if kind == "beam":
            return ask(srv, ids, 4, 4, 40, None, 1.0, False)
        r = srv.client.completions.create(model="base", prompt=ids, max_tokens=40, temperature=0,
                                          extra_body={"ignore_eos": True})
        return [r.choices[0].text]

    roomy = Server(leantune_bin, "--model", str(path), "--served-model-name", "base", "--context", "128",
                   "--max-seqs", "16", "--block-size", "4")
    # 40 blocks of 4: a beam search of 4 x 48 positions fits alone (about 4 x 12 + 2 blocks), not with others
    tight = Server(leantune_bin, "--model", str(path), "--served-model-name", "base", "--context", "128",
                   "--max-seqs", "16", "--block-size", "4", "--kv-memory", str(60 * kv_block_mib(path, 4)))
    try:
        alone = [run(roomy, j) for j in jobs]
        for srv in (roomy, tight):
            with concurrent.futures.ThreadPoolExecutor(len(jobs)) as ex:
                assert list(ex.map(lambda j: run(srv, j), jobs)) == alone
        assert tight.metric("leantune_preemptions_total") > 0
        assert tight.metric("leantune_kv_blocks_in_use") == 0  # every beam's blocks came back
        want, _ = hf_beams(model, PROMPT_IDS[1], 4, 4, 40, None)
        assert alone[1] == [tok.decode(h) for h in want]
    finally:
        roomy.close()
        tight.close()


def kv_block_mib(path, block_size):
    import json
    c = json.loads((path / "config.json").read_text())
    kv_dim = c["num_key_value_heads"] * (c["hidden_size"] // c["num_attention_heads"])
    return 2 * c["num_hidden_layers"] * block_size * kv_dim * 4 / (1 << 20)


def test_bad_beam_requests(server):
    body = {"model": "base", "prompt": [1, 2, 3], "max_tokens": 4, "use_beam_search": True, "best_of": 2}
    for extra, param in [({"n": 3}, "n"), ({"early_stopping": "sometimes"}, "early_stopping"),
                         ({"logprobs": 1}, "logprobs"), ({"stop_token_ids": [100000]}, "stop_token_ids"),
                         ({"length_penalty": "long"}, "length_penalty"), ({"num_beams": 0}, "num_beams")]:
        status, text = server.raw("POST", "/v1/completions", {**body, **extra})
        assert status == 400, (extra, text)
        assert json.loads(text)["error"]["param"] == param, text
    # more beams than the server runs rows at once (--max-seqs 16)
    status, text = server.raw("POST", "/v1/completions", {**body, "best_of": 17})
    assert status == 400 and "max_seqs" in json.loads(text)["error"]["message"], text
    status, _ = server.raw("POST", "/v1/completions", body)
    assert status == 200

# `leantune serve` through the official `openai` client (and raw HTTP where the client cannot
# send what is tested): completions and chat, streaming and not, on stories260K (greedy output
# equals `leantune generate`) and on a random HF model with two PEFT adapters (greedy output equals
# transformers + PEFT; 64 concurrent requests across the base and both adapters equal each sent
# alone; adapters loaded and unloaded at run time); bad requests get OpenAI-style errors with the
# right status (malformed JSON, unknown model, prompt longer than the context, negative
# max_tokens, a 100 MB body, a full queue, a client gone mid-stream) and the server keeps serving.
# Servers listen on 127.0.0.1 only and are always killed at the end; every wait is bounded.
import concurrent.futures
import json
import os
import re
import socket
import subprocess
import time
import urllib.error
import urllib.request

import openai
import pytest
import torch

from test_gguf_export import byte_level_tokenizer
from test_model_parity import build

START_TIMEOUT = 60


class Server:
    def __init__(self, leantune_bin, *args):
        self.checked = False
        self.proc = subprocess.Popen([leantune_bin, "serve", "--host", "127.0.0.1", "--port", "0", "-t", "2", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + START_TIMEOUT
        line = ""
        while time.time() < deadline and self.proc.poll() is None:
            line = self.proc.stdout.readline()
            if "listening on" in line:
                break
        m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        if not m:
            self.close()
            raise AssertionError(f"server did not start: {line!r} {self.proc.stderr.read()}")
        self.port = int(m.group(1))
        self.url = f"http://127.0.0.1:{self.port}"
        self.client = openai.OpenAI(base_url=self.url + "/v1", api_key="unused", max_retries=0, timeout=120)

    def close(self):
        sanitized = os.environ.get("LEANTUNE_SANITIZED") == "1"
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60 if sanitized else 10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if sanitized and not self.checked:  # under ASan/UBSan: a clean exit, no report, no leak
            self.checked = True
            err = self.proc.stderr.read()
            assert self.proc.returncode == 0 and "Sanitizer" not in err and "runtime error" not in err, \
                f"the server exited with {self.proc.returncode}:\n{err[-6000:]}"

    def raw(self, method, path, body=None, timeout=60):
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def metric(self, name):
        _, text = self.raw("GET", "/metrics")
        m = re.search(rf"^{name} (\S+)$", text, re.M)
        assert m, f"{name} missing from /metrics"
        return float(m.group(1))


@pytest.fixture
def server_factory(leantune_bin):
    servers = []

    def make(*args):
        s = Server(leantune_bin, *args)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.close()


@pytest.fixture
def stories(server_factory, shared_dir):
    d = shared_dir / "models" / "stories260K"
    return server_factory("--model", str(d / "stories260K.bin"), "--tokenizer", str(d / "tok512.bin"),
                          "--context", "256")


def cli_generate(leantune_bin, shared_dir, prompt, n):
    d = shared_dir / "models" / "stories260K"
    r = subprocess.run([leantune_bin, "generate", "-m", str(d / "stories260K.bin"), "--tokenizer", str(d / "tok512.bin"),
                        "-p", prompt, "-n", str(n), "--temperature", "0", "--quiet"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(prompt)
    return r.stdout[len(prompt):].rstrip("\n")


def test_stories_completions_and_chat(stories, leantune_bin, shared_dir):
    c = stories.client
    assert [m.id for m in c.models.list().data] == ["stories260K"]
    prompt = "Lily and Tom went to the park."
    r = c.completions.create(model="stories260K", prompt=prompt, max_tokens=40, temperature=0)
    assert r.choices[0].text == cli_generate(leantune_bin, shared_dir, prompt, 40)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 40 and r.usage.total_tokens == r.usage.prompt_tokens + 40
    chunks = list(c.completions.create(model="stories260K", prompt=prompt, max_tokens=40, temperature=0, stream=True))
    assert "".join(ch.choices[0].text for ch in chunks if ch.choices) == r.choices[0].text
    assert chunks[-1].choices[0].finish_reason == "length"
    # seeded sampling is reproducible; n choices with one seed differ
    a = c.completions.create(model="stories260K", prompt=prompt, max_tokens=30, temperature=1, seed=5, n=2)
    b = c.completions.create(model="stories260K", prompt=prompt, max_tokens=30, temperature=1, seed=5, n=2)
    assert [x.text for x in a.choices] == [x.text for x in b.choices]
    assert a.choices[0].text != a.choices[1].text
    # logprobs: one per token, each <= 0
    lp = c.completions.create(model="stories260K", prompt=prompt, max_tokens=8, temperature=0, logprobs=0)
    assert len(lp.choices[0].logprobs.token_logprobs) == 8
    assert all(x <= 0 for x in lp.choices[0].logprobs.token_logprobs)
    assert "".join(lp.choices[0].logprobs.tokens) == lp.choices[0].text
    # chat, whole and streamed
    msgs = [{"role": "system", "content": "You tell stories."}, {"role": "user", "content": "Tell me about a cat."}]
    ch = c.chat.completions.create(model="stories260K", messages=msgs, max_tokens=30, temperature=0)
    assert ch.choices[0].message.role == "assistant" and len(ch.choices[0].message.content) > 0
    parts = list(c.chat.completions.create(model="stories260K", messages=msgs, max_tokens=30, temperature=0,
                                           stream=True, stream_options={"include_usage": True}))
    assert parts[0].choices[0].delta.role == "assistant"
    assert "".join(p.choices[0].delta.content or "" for p in parts if p.choices) == ch.choices[0].message.content
    assert parts[-1].usage.completion_tokens == ch.usage.completion_tokens
    assert stories.raw("GET", "/health") == (200, '{"status":"ok"}')
    assert stories.metric("leantune_generation_tokens_total") >= 40 * 2 + 30 * 2


def test_bad_requests(stories):
    c = stories.client
    status, body = stories.raw("POST", "/v1/completions", b'{"prompt": "Once", "max_tokens": ')
    assert status == 400 and json.loads(body)["error"]["type"] == "invalid_request_error"
    with pytest.raises(openai.NotFoundError) as e:
        c.completions.create(model="no-such-model", prompt="Once", max_tokens=4)
    assert e.value.body["code"] == "model_not_found"
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model="stories260K", prompt="Once upon a time " * 100, max_tokens=4)
    assert e.value.body["code"] == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model="stories260K", prompt="Once", max_tokens=-3)
    assert e.value.body["param"] == "max_tokens"
    with pytest.raises(openai.BadRequestError):
        c.chat.completions.create(model="stories260K", messages=[{"role": "wizard", "content": "hi"}])
    assert stories.raw("DELETE", "/v1/adapters/none")[0] == 404
    assert stories.raw("GET", "/v1/nothing")[0] == 404
    # a 100 MB body: 413 without reading it all, and the server keeps serving
    assert huge_body_status(stories.port, 100 << 20) == 413
    r = c.completions.create(model="stories260K", prompt="Once", max_tokens=4, temperature=0)
    assert r.usage.completion_tokens == 4


def test_deeply_nested_bodies_are_refused(server_factory, shared_dir, tmp_path):
    # a body nested 100,000 deep: a 400 naming the depth, not a stack overflow where the chat path
    # serializes the messages for a Jinja template (found by fuzz_openai_request); the server keeps serving
    tmpl = tmp_path / "t.jinja"
    tmpl.write_text("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
                    "{% if add_generation_prompt %}<assistant>{% endif %}")
    d = shared_dir / "models" / "stories260K"
    srv = server_factory("--model", str(d / "stories260K.bin"), "--tokenizer", str(d / "tok512.bin"),
                         "--context", "256", "--chat-template", str(tmpl))
    deep = b"[" * 100000 + b"]" * 100000
    for path, body in [("/v1/chat/completions", b'{"messages": ' + deep + b"}"),
                       ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "tools": ' + deep + b"}"),
                       ("/v1/completions", b'{"prompt": ' + deep + b"}"), ("/v1/adapters", deep)]:
        status, text = srv.raw("POST", path, body)
        assert status == 400 and "nests deeper than" in json.loads(text)["error"]["message"], (path, status, text[:300])
    r = srv.client.chat.completions.create(model="stories260K", messages=[{"role": "user", "content": "Once"}],
                                           max_tokens=4, temperature=0)
    assert r.usage.completion_tokens == 4


def huge_body_status(port, size):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {size}\r\n\r\n".encode())
        chunk = b" " * (1 << 20)
        try:
            for _ in range(size // len(chunk)):
                s.sendall(chunk)
        except OSError:
            pass  # the server answered and closed without reading the rest
        head = b""
        while b"\r\n" not in head:
            got = s.recv(4096)
            if not got:
                break
            head += got
        return int(head.split(b" ")[1])
    finally:
        s.close()


def test_client_gone_mid_stream_cancels(stories):
    body = json.dumps({"model": "stories260K", "prompt": "Once", "max_tokens": 200, "temperature": 0.9,
                       "stream": True, "ignore_eos": True}).encode()
    s = socket.create_connection(("127.0.0.1", stories.port), timeout=30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
              + str(len(body)).encode() + b"\r\n\r\n" + body)
    got = b""
    while b"data:" not in got:  # bounded by the socket timeout
        chunk = s.recv(4096)
        assert chunk, "the server closed the stream"
        got += chunk
    s.close()
    deadline = time.time() + 30
    while time.time() < deadline and stories.metric("leantune_requests_cancelled_total") < 1:
        time.sleep(0.1)
    assert stories.metric("leantune_requests_cancelled_total") == 1
    assert stories.metric("leantune_generation_tokens_total") < 200
    assert stories.metric("leantune_running_requests") == 0


def test_full_queue_gets_429_and_the_server_keeps_serving(server_factory, shared_dir):
    d = shared_dir / "models" / "stories260K"
    srv = server_factory("--model", str(d / "stories260K.bin"), "--tokenizer", str(d / "tok512.bin"),
                         "--max-seqs", "1", "--max-queue", "2", "--context", "512")

    def one(_):
        try:
            srv.client.completions.create(model="stories260K", prompt="Once", max_tokens=400, temperature=1,
                                          extra_body={"ignore_eos": True})
            return 200
        except openai.RateLimitError:
            return 429

    with concurrent.futures.ThreadPoolExecutor(16) as ex:
        codes = list(ex.map(one, range(16)))
    assert codes.count(429) > 0 and codes.count(200) >= 3
    r = srv.client.completions.create(model="stories260K", prompt="Once", max_tokens=4, temperature=0)
    assert r.usage.completion_tokens == 4


# ---- a random HF model with two PEFT adapters ----

PROMPTS = ["The quick brown fox", "Once upon a time there was", "Numbers 12345 and", "symbols !?; end.",
           "The lazy dog jumps over", "a little cat"]


@pytest.fixture(scope="module")
def hf_model(tmp_path_factory):
    from peft import LoraConfig, get_peft_model
    root = tmp_path_factory.mktemp("serve")
    model = build("smollm2", seed=3)
    model.save_pretrained(root / "base", safe_serialization=True)
    tok = byte_level_tokenizer(root / "base", 280)
    adapters = {}
    for name, cfg, seed in [("alpha", LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"],
                                                 init_lora_weights=False), 11),
                            ("beta", LoraConfig(r=8, lora_alpha=16, target_modules="all-linear",
                                                init_lora_weights=False), 12)]:
        torch.manual_seed(seed)
        pm = get_peft_model(build("smollm2", seed=3), cfg)
        pm.save_pretrained(root / name)
        adapters[name] = (root / name, pm.eval())
    return root, model, tok, adapters


def hf_greedy(model, tok, prompt, n):
    ids = tok.encode(prompt).ids
    model.generation_config.eos_token_id = None  # run all n steps, as ignore_eos does
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, pad_token_id=0)
    return out[0, len(ids):].tolist()


def test_adapters_served_unmerged(server_factory, hf_model):
    root, model, tok, adapters = hf_model
    srv = server_factory("--model", str(root / "base"), "--served-model-name", "base",
                         "--adapter", f"alpha={adapters['alpha'][0]}", "--adapter", f"beta={adapters['beta'][0]}")
    c = srv.client
    assert sorted(m.id for m in c.models.list().data) == ["alpha", "base", "beta"]
    # greedy tokens equal transformers (+ PEFT, unmerged there too) on the base and each adapter
    for name, ref in [("base", model.eval()), ("alpha", adapters["alpha"][1]), ("beta", adapters["beta"][1])]:
        for p in PROMPTS[:3]:
            want = hf_greedy(ref, tok, p, 12)
            r = c.completions.create(model=name, prompt=p, max_tokens=12, temperature=0,
                                     extra_body={"ignore_eos": True})
            assert r.choices[0].text == tok.decode(want), (name, p)
    # 64 concurrent greedy requests across the base and both adapters equal each sent alone
    jobs = [(["base", "alpha", "beta"][i % 3], PROMPTS[i % len(PROMPTS)], 8 + i % 13) for i in range(64)]

    def run(job):
        model_name, prompt, n = job
        r = c.completions.create(model=model_name, prompt=prompt, max_tokens=n, temperature=0,
                                 extra_body={"ignore_eos": True})
        return r.choices[0].text

    alone = [run(j) for j in jobs]
    with concurrent.futures.ThreadPoolExecutor(64) as ex:
        together = list(ex.map(run, jobs))
    assert together == alone
    assert srv.metric("leantune_requests_total") == 9 + 128
    # streaming chat on an adapter
    parts = list(c.chat.completions.create(model="beta", messages=[{"role": "user", "content": "hi"}],
                                           max_tokens=10, temperature=0, stream=True))
    whole = c.chat.completions.create(model="beta", messages=[{"role": "user", "content": "hi"}], max_tokens=10,
                                      temperature=0)
    assert "".join(p.choices[0].delta.content or "" for p in parts if p.choices) == whole.choices[0].message.content
    # run-time adapter load / unload
    assert srv.raw("POST", "/v1/adapters", {"name": "gamma", "path": str(adapters["alpha"][0])})[0] == 201
    assert srv.raw("POST", "/v1/adapters", {"name": "gamma", "path": str(adapters["alpha"][0])})[0] == 409
    assert srv.raw("POST", "/v1/adapters", {"name": "delta", "path": str(root / "missing")})[0] == 400
    g = c.completions.create(model="gamma", prompt=PROMPTS[0], max_tokens=12, temperature=0,
                             extra_body={"ignore_eos": True})
    a = c.completions.create(model="alpha", prompt=PROMPTS[0], max_tokens=12, temperature=0,
                             extra_body={"ignore_eos": True})
    assert g.choices[0].text == a.choices[0].text
    assert srv.raw("DELETE", "/v1/adapters/gamma")[0] == 200
    with pytest.raises(openai.NotFoundError):
        c.completions.create(model="gamma", prompt=PROMPTS[0], max_tokens=4)


def test_adapter_eviction_and_prefix_cache_change_nothing(server_factory, hf_model):
    root, model, tok, adapters = hf_model
    args = ["--model", str(root / "base"), "--served-model-name", "base", "--adapter", f"alpha={adapters['alpha'][0]}",
            "--adapter", f"beta={adapters['beta'][0]}", "--block-size", "4"]
    shared = "The quick brown fox jumps over the lazy dog. " * 3
    jobs = [(m, shared + p) for m in ["base", "alpha", "beta"] for p in PROMPTS]

    def outputs(srv):
        def one(job):
            r = srv.client.completions.create(model=job[0], prompt=job[1], max_tokens=10, temperature=0,
                                              extra_body={"ignore_eos": True})
            return r.choices[0].text
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            return list(ex.map(one, jobs))

    plain = server_factory(*args, "--no-prefix-cache")
    want = outputs(plain)
    assert plain.metric("leantune_prefix_cache_hits_total") == 0
    tight = server_factory(*args, "--adapter-memory", "0.17")  # alpha 32 KB, beta 163 KB: one at a time
    assert outputs(tight) == want
    assert tight.metric("leantune_prefix_cache_hits_total") > 0
    assert tight.metric("leantune_adapter_evictions_total") > 0
    assert tight.metric("leantune_adapters_resident") == 1


def test_a_thousand_requests_at_once(server_factory, shared_dir):
    # every one is answered (200, or 429 once --max-queue requests wait); none is refused at connect
    d = shared_dir / "models" / "stories260K"
    srv = server_factory("--model", str(d / "stories260K.bin"), "--tokenizer", str(d / "tok512.bin"),
                         "--context", "128", "--max-queue", "64", "--max-seqs", "16")
    body = {"model": "stories260K", "prompt": "Once", "max_tokens": 8, "temperature": 0}

    def one(_):
        try:
            return srv.raw("POST", "/v1/completions", body, timeout=60)[0]
        except OSError as e:
            return type(e).__name__

    with concurrent.futures.ThreadPoolExecutor(1000) as ex:
        codes = list(ex.map(one, range(1000)))
    assert set(codes) <= {200, 429}, {c for c in codes if c not in (200, 429)}
    assert codes.count(200) >= 64
    assert srv.raw("GET", "/health")[0] == 200
    assert srv.metric("leantune_running_requests") == 0

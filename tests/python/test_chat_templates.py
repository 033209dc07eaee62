"""leantune's native Jinja engine against jinja2 as transformers runs it (ImmutableSandboxedEnvironment
with trim_blocks=True, lstrip_blocks=True, transformers' tojson / raise_exception / strftime_now, its
message normalization), character for character.

The templates (tests/python/chat_template_cases.py) were written for this test in the styles of
current model families; the conversations are random (seeded): system prompts, multi-turn chats,
tools and tool calls, reasoning, content parts, text with unicode, quotes, braces and odd
whitespace. `leantune chat-template --input` renders them all in one process per template.
Also: assistant segments ({% generation %} spans equal transformers' assistant indices; prefix
rendering covers every assistant turn), and errors that name the template line.
"""
import copy
import json
import random
import re
import subprocess

import pytest

from chat_template_cases import TEMPLATES

jinja2 = pytest.importorskip("jinja2")

try:  # transformers' own pipeline: the exact environment and message handling
    from transformers.utils.chat_template_utils import _normalize_chat_messages, render_jinja_template
except ImportError:  # pragma: no cover - the same environment built here
    _normalize_chat_messages = None
    render_jinja_template = None

N_CONVERSATIONS = 40

WORDS = ["hello", "world", "The", "quick", "brown", "fox", "jumps", "é", "naïve", "中文", "テスト", "😀", "👍🏽",
         "don't", 'say "hi"', "it's", "{{ not a tag }}", "{% if %}", "{#c#}", "a\\b", "C:\\path", "<tag>", "&amp;",
         "tab\there", "line\nbreak", "  spaced  ", "100%", "$5", "x=1;", "[INST]", "<|im_end|>", "",
         "Übermaß", "ΣΊΣΥΦΟΣ", "straße", "İstanbul", "\u00a0nbsp", "end."]

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "The city, e.g. Paris"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "add", "description": "Add two numbers.  ",
        "parameters": {"type": "object", "properties": {
            "a": {"type": "number"}, "b": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}},
            "opts": {"type": "object"}, "flag": {"type": "boolean"}}, "required": ["a", "b"]}}},
    {"type": "function", "function": {
        "name": "search_web", "description": "Search the web — returns «results».",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "k": {"type": "integer"}}}}},
]


def text(rng, lo=1, hi=12):
    parts = [rng.choice(WORDS) for _ in range(rng.randint(lo, hi))]
    s = " ".join(parts)
    r = rng.random()
    if r < 0.1:
        s = " " + s
    elif r < 0.2:
        s = s + "\n"
    elif r < 0.25:
        s = s + "?"
    elif r < 0.3:
        s = s + "!"
    return s


def tool_call(rng, features, string_args=False):
    fn = rng.choice(TOOLS)["function"]
    args = {"city": rng.choice(["Paris", "東京", "São Paulo"]), "unit": "celsius"} if fn["name"] == "get_weather" else \
        {"a": rng.choice([1, 2.5, -3, 1e-7, 10**12]), "b": rng.randint(0, 9), "tags": ["x", "y"], "flag": rng.random() < 0.5,
         "opts": {"nested": [1, None, True]}} if fn["name"] == "add" else {"query": text(rng, 1, 4), "k": 3}
    call = {"type": "function", "function": {"name": fn["name"], "arguments": json.dumps(args) if string_args else args}}
    if "tool_calls_id9" in features:
        call["id"] = "".join(rng.choice("abcdefghij0123456789") for _ in range(9))
    return call


def content(rng, features):
    if "parts" in features and rng.random() < 0.4:
        return [{"type": "text", "text": text(rng)} for _ in range(rng.randint(1, 3))]
    return text(rng)


def conversation(rng, features):
    """Random messages the template accepts, and whether it ends with a user turn."""
    msgs = []
    if "system" in features and rng.random() < 0.5:
        msgs.append({"role": "system", "content": text(rng, 3, 20)})
    tool_kinds = {"tool_calls", "tool_calls_single", "tool_calls_id9", "tool_calls_string"} & features
    for turn in range(rng.randint(1, 4)):
        msgs.append({"role": "user", "content": content(rng, features)})
        if tool_kinds and rng.random() < 0.4:
            n = 1 if ("tool_calls_single" in features or rng.random() < 0.6) else 2
            calls = [tool_call(rng, features, "tool_calls_string" in features) for _ in range(n)]
            m = {"role": "assistant", "tool_calls": calls}
            m["content"] = None if rng.random() < 0.5 else ""  # None is dropped, as transformers does
            if "tool_calls_id9" in features or "tool_calls_string" in features:
                m.pop("content", None) if rng.random() < 0.5 else None
            msgs.append(m)
            for c in calls:
                t = {"role": "tool", "content": json.dumps({"result": rng.randint(0, 99), "note": text(rng, 1, 3)})}
                if "id" in c:
                    t["tool_call_id"] = c["id"]
                msgs.append(t)
            if "alternate" in features or "tool_calls_id9" in features:
                msgs.append({"role": "assistant", "content": text(rng)})
                continue
        if rng.random() < 0.8 or turn < 1:
            a = {"role": "assistant", "content": content(rng, features)}
            if "reasoning" in features and rng.random() < 0.5:
                a["reasoning_content"] = text(rng, 2, 8)
            if rng.random() < 0.1 and "alternate" not in features:
                a["name"] = "bot"
            msgs.append(a)
        else:
            break
    if "alternate" in features and msgs[-1]["role"] == "assistant" and rng.random() < 0.5:
        msgs.append({"role": "user", "content": text(rng)})
    return msgs


def requests_for(name, features, seed):
    rng = random.Random(f"{name}-{seed}")
    reqs = []
    for _ in range(N_CONVERSATIONS):
        msgs = conversation(rng, features)
        if rng.random() < 0.1:  # a conversation the template may refuse: both must then raise
            if "system" not in features:
                msgs.insert(0, {"role": "system", "content": "not supported here"})
            else:
                msgs.insert(len(msgs) - 1, {"role": "user", "content": text(rng)})
        req = {"messages": msgs, "add_generation_prompt": msgs[-1]["role"] != "assistant" or rng.random() < 0.2}
        if "tools" in features and rng.random() < 0.6:
            req["tools"] = rng.sample(TOOLS, rng.randint(1, len(TOOLS)))
        vars_ = {}
        if rng.random() < 0.5:
            vars_["date_string"] = rng.choice(["01 Jan 2025", "29 Feb 2024"])
        if rng.random() < 0.5:
            vars_["enable_thinking"] = rng.random() < 0.5
        if vars_:
            req["vars"] = vars_
        reqs.append(req)
    return reqs


def oracle(source, req, special):
    """transformers' rendering of one request: (text, None) or (None, exception)."""
    msgs = copy.deepcopy(req["messages"])
    kwargs = dict(special)
    kwargs.update(req.get("vars", {}))
    try:
        msgs = _normalize_chat_messages(msgs)
        out, _ = render_jinja_template(conversations=[msgs], tools=req.get("tools"), chat_template=source,
                                       add_generation_prompt=req["add_generation_prompt"], **kwargs)
        return out[0], None
    except Exception as e:  # noqa: BLE001 - any template error is an expected outcome to compare
        return None, e


def leantune_render(leantune_bin, tmp_path, source, special, reqs, segments=False):
    tpl = tmp_path / "t.jinja"
    tpl.write_text(source, encoding="utf-8")
    inp = tmp_path / "req.json"
    inp.write_text(json.dumps(reqs, ensure_ascii=False), encoding="utf-8")
    cmd = [leantune_bin, "chat-template", "--template", str(tpl), "--special-tokens", json.dumps(special),
           "--input", str(inp)] + (["--segments"] if segments else [])
    r = subprocess.run(cmd, capture_output=True, text=True, encoding="utf-8")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


needs_transformers = pytest.mark.skipif(render_jinja_template is None, reason="transformers' chat template utils")


@needs_transformers
def test_at_least_30_templates():
    assert len(TEMPLATES) >= 30
    assert len({name for name, *_ in TEMPLATES}) == len(TEMPLATES)


@needs_transformers
@pytest.mark.parametrize("name,source,features,special", TEMPLATES, ids=[t[0] for t in TEMPLATES])
def test_rendering_equals_jinja2(leantune_bin, tmp_path, name, source, features, special):
    reqs = requests_for(name, features, 0)
    got = leantune_render(leantune_bin, tmp_path, source, special, reqs)
    assert len(got) == len(reqs)
    n_ok = 0
    for i, (req, g) in enumerate(zip(reqs, got)):
        want, err = oracle(source, req, special)
        if err is not None:
            assert "error" in g, f"{name} #{i}: jinja2 raised {err!r} but leantune rendered {g!r}"
            continue
        assert "error" not in g, f"{name} #{i}: leantune failed: {g['error']}\nrequest: {json.dumps(req)}"
        assert g["text"] == want, f"{name} #{i}: differs\nrequest: {json.dumps(req, ensure_ascii=False)}"
        n_ok += 1
    assert n_ok >= N_CONVERSATIONS // 2, f"{name}: only {n_ok} conversations rendered; the generator is off"


@needs_transformers
def test_generation_spans_equal_transformers_assistant_indices(leantune_bin, tmp_path):
    name, source, features, special = next(t for t in TEMPLATES if t[0] == "generation_tags")
    reqs = requests_for(name, features, 1)
    got = leantune_render(leantune_bin, tmp_path, source, special, reqs, segments=True)
    for req, g in zip(reqs, got):
        msgs = _normalize_chat_messages(copy.deepcopy(req["messages"]))
        out, indices = render_jinja_template(conversations=[msgs], tools=req.get("tools"), chat_template=source,
                                             return_assistant_tokens_mask=True,
                                             add_generation_prompt=req["add_generation_prompt"], **special)
        pos, spans = 0, []
        for s in g["segments"]:
            if s["assistant"]:
                spans.append((pos, pos + len(s["text"])))
            pos += len(s["text"])
        assert "".join(s["text"] for s in g["segments"]) == out[0]
        assert spans == [tuple(x) for x in indices[0] if x[1] > x[0]]


@needs_transformers
@pytest.mark.parametrize("name", ["chatml", "llama3", "phi3", "zephyr", "mistral_v1", "gemma", "smollm2", "olmo"])
def test_prefix_segments_cover_each_assistant_turn(leantune_bin, tmp_path, name):
    _, source, features, special = next(t for t in TEMPLATES if t[0] == name)
    reqs = [r for r in requests_for(name, features, 2) if any(m["role"] == "assistant" for m in r["messages"])]
    for r in reqs:
        r["add_generation_prompt"] = False
    texts = leantune_render(leantune_bin, tmp_path, source, special, reqs)
    segs = leantune_render(leantune_bin, tmp_path, source, special, reqs, segments=True)
    for req, t, s in zip(reqs, texts, segs):
        if "error" in t:
            continue
        assert "".join(x["text"] for x in s["segments"]) == t["text"]
        assistant = [x["text"] for x in s["segments"] if x["assistant"]]
        replies = [m["content"] for m in req["messages"] if m["role"] == "assistant"]
        assert len(assistant) == len(replies), (assistant, replies)
        for seg, reply in zip(assistant, replies):
            assert reply.strip() in seg, (seg, reply)
            assert not seg.endswith("\n")


def test_chatml_segments_exact(leantune_bin, tmp_path):
    source = TEMPLATES[0][1]
    req = {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U1"},
                        {"role": "assistant", "content": "A1"}, {"role": "user", "content": "U2"},
                        {"role": "assistant", "content": "A2"}], "add_generation_prompt": False}
    segs = leantune_render(leantune_bin, tmp_path, source, {}, [req], segments=True)[0]["segments"]
    assert [(s["text"], s["assistant"]) for s in segs] == [
        ("<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n<|im_start|>assistant\n", False),
        ("A1<|im_end|>", True),
        ("\n<|im_start|>user\nU2<|im_end|>\n<|im_start|>assistant\n", False),
        ("A2<|im_end|>", True),
        ("\n", False)]


def line_of(source, needle):
    return next(i for i, line in enumerate(source.split("\n"), 1) if needle in line)


@needs_transformers
def test_raise_exception_names_the_line(leantune_bin, tmp_path):
    _, source, _, special = next(t for t in TEMPLATES if t[0] == "mistral_v1")
    req = {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], "add_generation_prompt": True}
    _, err = oracle(source, req, special)
    assert err is not None and "alternate" in str(err)
    got = leantune_render(leantune_bin, tmp_path, source, special, [req])[0]
    assert "alternate user/assistant" in got["error"]
    assert f"line {line_of(source, 'roles must alternate')}:" in got["error"]


# (what, template, line, a word the message holds); the first three are valid jinja2 that leantune
# does not support (chat templates do not use them), the others fail in jinja2 too.
UNSUPPORTED = ("include", "extends", "unknown filter")
BROKEN = [
    ("include", "{% for m in messages %}\n{{ m.content }}\n{% include 'footer.jinja' %}\n{% endfor %}", 3, "include"),
    ("extends", "{% extends 'base.jinja' %}", 1, "extends"),
    ("unknown filter", "{{ bos_token }}\n{{ messages[0].content | wordwrap(20) }}", 2, "wordwrap"),
    ("unknown test", "{% if messages is sameas_not none %}\nx\n{% endif %}", 1, "sameas_not"),
    ("unclosed if", "{% for m in messages %}\n{% if m.role == 'user' %}\n{{ m.content }}\n{% endfor %}", 4, "endfor"),
    ("bad expression", "{% set x = 1 %}\n\n\n{{ x + }}", 4, "expected"),
    ("unclosed string", "line one\n{{ 'abc }}", 2, "string"),
    ("undefined attribute", "ok\n{{ messages[0].nope.deeper }}", 2, "nope"),
    ("type error", "{{ 'a' }}\n{{ 'x' + 1 }}", 2, "concatenate"),
    ("not iterable", "\n\n{% for x in 5 %}{{ x }}{% endfor %}", 3, "not iterable"),
    ("modifying a list", "{% set l = [] %}\n{% set _ = l.append(1) %}", 2, "unsafe"),
    ("namespace underscore", "{% set ns = namespace() %}\n{% set ns._x = 1 %}", 2, "underscore"),
]


@pytest.mark.parametrize("what,source,line,word", BROKEN, ids=[b[0] for b in BROKEN])
def test_errors_name_the_line(leantune_bin, tmp_path, what, source, line, word):
    req = {"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": True}
    if render_jinja_template is not None and what not in UNSUPPORTED:
        _, err = oracle(source, req, {})
        assert err is not None, f"jinja2 renders '{what}' without error"
    tpl = tmp_path / "broken.jinja"
    tpl.write_text(source)
    msgs = tmp_path / "m.json"
    msgs.write_text(json.dumps(req["messages"]))
    r = subprocess.run([leantune_bin, "chat-template", "--template", str(tpl), "--messages", str(msgs)],
                       capture_output=True, text=True)
    assert r.returncode != 0
    assert f"broken.jinja: line {line}:" in r.stderr, r.stderr
    assert word in r.stderr, r.stderr


def test_model_folder_template_and_named_templates(leantune_bin, tmp_path):
    """tokenizer_config.json's chat_template (a list of named templates), chosen as transformers does."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    tok = Tokenizer(models.BPE(vocab={"a": 0, "b": 1, "<s>": 2, "</s>": 3}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel()
    tok.save(str(tmp_path / "tokenizer.json"))
    cfg = {"bos_token": "<s>", "eos_token": {"content": "</s>"}, "chat_template": [
        {"name": "default", "template": "D{{ bos_token }}{% for m in messages %}[{{ m.content }}]{% endfor %}{{ eos_token }}"},
        {"name": "tool_use", "template": "T{{ tools | length }}{% for m in messages %}({{ m.content }}){% endfor %}"}]}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(cfg))
    msgs = tmp_path / "m.json"
    msgs.write_text(json.dumps([{"role": "user", "content": "x"}]))
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS[:2]))

    def run(*extra):
        r = subprocess.run([leantune_bin, "chat-template", "--tokenizer", str(tmp_path), "--messages", str(msgs), *extra],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return r.stdout

    assert run() == "D<s>[x]</s>"
    assert run("--tools", str(tools)) == "T2(x)"
    assert run("--name", "default", "--tools", str(tools)) == "D<s>[x]</s>"
    r = subprocess.run([leantune_bin, "chat-template", "--tokenizer", str(tmp_path), "--name", "nope", "--messages",
                        str(msgs)], capture_output=True, text=True)
    assert r.returncode != 0 and "tool_use" in r.stderr and "default" in r.stderr
    # chat_template.jinja wins over tokenizer_config.json
    (tmp_path / "chat_template.jinja").write_text("J{% for m in messages %}{{ m.role }}{% endfor %}\n")
    assert run() == "Juser"


def test_training_uses_the_models_template(leantune_bin, tmp_path):
    """`leantune train` on {"messages"} records with the model's chat template (chat_template: auto):
    the run trains, a wrong template name is refused before training, and a full fine-tune's output
    folder keeps the template."""
    torch = pytest.importorskip("torch")  # noqa: F841
    from test_model_parity import build
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    rng = random.Random(5)
    words = "the fox crow wolf lamb said once upon a time grapes sour cheese tree river".split()
    convs = [[{"role": "user", "content": " ".join(rng.choices(words, k=rng.randint(3, 9)))},
              {"role": "assistant", "content": " ".join(rng.choices(words, k=rng.randint(3, 9)))}] for _ in range(40)]
    data = tmp_path / "chat.jsonl"
    data.write_text("\n".join(json.dumps({"messages": c}) for c in convs) + "\n")
    base = tmp_path / "base"
    build("llama3").save_pretrained(base, safe_serialization=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([m["content"] for c in convs for m in c] + ["<|im_start|>user\n"],
                            trainers.BpeTrainer(vocab_size=290, special_tokens=["<|im_start|>", "<|im_end|>"],
                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(str(base / "tokenizer.json"))
    (base / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>", "chat_template": TEMPLATES[0][1]}))
    common = [leantune_bin, "train", "--base-model", str(base), "--datasets", str(data), "--max-steps", "2",
              "--micro-batch-size", "2", "--sequence-len", "64", "--threads", "1", "--val-set-size", "0"]
    r = subprocess.run(common + ["--method", "full", "--output-dir", str(tmp_path / "out")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    outs = list((tmp_path / "out").rglob("tokenizer_config.json"))
    assert outs and json.loads(outs[0].read_text())["chat_template"] == TEMPLATES[0][1]
    r = subprocess.run(common + ["--chat-template", "tool_use", "--output-dir", str(tmp_path / "out2")],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "tool_use" in r.stderr, r.stderr


def test_server_formats_chats_with_the_models_template(leantune_bin, tmp_path):
    """`leantune serve` (--chat-template auto) renders /v1/chat/completions with the model's own
    template: the prompt it counts is our rendering encoded without special tokens."""
    pytest.importorskip("openai")
    from test_gguf_export import byte_level_tokenizer
    from test_model_parity import build
    from test_server import Server
    base = tmp_path / "m"
    build("llama3").save_pretrained(base, safe_serialization=True)
    byte_level_tokenizer(base, 290)
    source = "{{ bos_token }}{% for m in messages %}<<{{ m.role | upper }}>> {{ m.content }}\n{% endfor %}" \
             "{% if add_generation_prompt %}<<ASSISTANT>>{% endif %}"
    (base / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "chat_template": source}))
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "the fox and the grapes"}]
    (tmp_path / "m.json").write_text(json.dumps(msgs))
    r = subprocess.run([leantune_bin, "chat-template", "--tokenizer", str(base), "--messages", str(tmp_path / "m.json"),
                        "--add-generation-prompt"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "<|endoftext|><<SYSTEM>> be brief\n<<USER>> the fox and the grapes\n<<ASSISTANT>>"
    t = subprocess.run([leantune_bin, "tokenize", "--tokenizer", str(base), "--text", r.stdout, "--no-special"],
                       capture_output=True, text=True)
    assert t.returncode == 0, t.stderr
    n_prompt = len(t.stdout.split())
    s = Server(leantune_bin, "--model", str(base), "--context", "256")
    try:
        out = s.client.chat.completions.create(model="m", messages=msgs, max_tokens=3, temperature=0)
        assert out.usage.prompt_tokens == n_prompt
    finally:
        s.close()

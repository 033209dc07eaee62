"""Parity of `leantune tokenize` with the Hugging Face `tokenizers` library.

Trains small tokenizers in a temporary folder (no downloads): a Llama 3-style byte-level BPE
(Split regex + ByteLevel, ignore_merges, special tokens, TemplateProcessing BOS), a GPT-2-style
byte-level BPE (ByteLevel with its own regex and add_prefix_space), and a Llama 2-style
SentencePiece BPE (Prepend/Replace normalizer, byte_fallback, Replace/ByteFallback/Fuse/Strip
decoder, TemplateProcessing "<s>"). Then compares ids and decoded text on hard strings.
LEANTUNE_BIN names the leantune binary (default build-tok/bin/leantune next to this repo).
"""
import json
import os
import subprocess
from pathlib import Path

import pytest

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
BIN = os.environ.get("LEANTUNE_BIN", str(REPO / "build-tok" / "bin" / "leantune"))

LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

CORPUS_BASE = [
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.",
    "One day, she saw a big, red ball. She wanted to play with it, but it was too high.",
    "Lily's mom said, \"Lily, let's go to the park.\" Lily was sad and didn't know what to do.",
    "The quick brown fox jumps over the lazy dog 1234567890 times; I'LL say we've done it!",
    "café naïve résumé façade coöperate Zoë — «quotes» and “smart quotes”.",
    "中文字符测试，日本語のテキスト。한국어 문장입니다.",
    "مرحبا بالعالم. שלום עולם. नमस्ते दुनिया. สวัสดีชาวโลก",
    "def f(x):\n    return x * 2\n\n\tindented\twith\ttabs\r\n",
    "Numbers: 3.14159, 2,718,281, 1e-9, 0xFF, 42nd, 100%.",
]
CORPUS = [f"{line} {i}" for i in range(30) for line in CORPUS_BASE]

HARD_STRINGS = [
    "",
    " ",
    "   ",
    "\n",
    "\n\n\n",
    "\t\t x",
    "Hello world",
    "hello world",
    "  leading spaces",
    "trailing spaces   ",
    "multiple   spaces\t\ttabs\n\nnewlines\r\nand CRLF",
    " " * 37 + "x" + " " * 5,
    "Once upon a time, there was a little girl named Lily.",
    "don't I'LL we've THEY'RE it's O'Neil",
    "café naïve résumé",
    "e\u0301 a\u0308 n\u0303 Zoe\u0308 \u1e9b\u0323",  # combining marks
    "😀 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷",  # emoji, skin tone, ZWJ sequences, flags
    "中文字符测试 日本語のテキスト 한국어 龘",
    "مرحبا بالعالم",
    "שלום עולם",
    "नमस्ते दुनिया",
    "1234567890 3.14159 1,000,000 ٣٤٥ １２３",
    "\u00a0nbsp\u2003em space\u3000ideographic\u200bzero-width",
    "<|begin_of_text|>Hello<|eot_id|> world <|eot_id|><|eot_id|>",
    "text <|end_of_text|>",
    "<|eot_id partial <|eot_id|",
    "<s> hi </s>",
    "x<s>y</s>z",
    "<unk>",
    "a<mask>b  <mask>  c",
    "custom_token inside: my_custom_word ok",
    "tab\there",
    "<｜begin▁of▁sentence｜>two words and two  words<｜begin▁of▁sentence｜>",
    "a,b;;c 12.5-7 (x)\t\ty\n\nz",
    "solo solo, xsolo soloist _solo solo_ (solo)",
    "a <|rs|>   b<|rs|>\n\nc <|rs|>",
    "my word and my  word",
    "\r\n\r\n",
    "ends with newline\n",
    "mixed 中文 and English and 😀 emoji!!!",
    "ÿþ\u0100\u0101 control \u0001\u001f bytes",
]


def _train(tok, trainer):
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def build_llama3(tmp: Path) -> Path:
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=700, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    _train(tok, trainer)
    tok.add_tokens([AddedToken("my_custom_word", normalized=False), AddedToken("two words", normalized=False)])
    tok.add_special_tokens(["<｜begin▁of▁sentence｜>"])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)]),
        ]
    )
    path = tmp / "llama3.json"
    tok.save(str(path))
    return path


def build_gpt2(tmp: Path) -> Path:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=500, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    _train(tok, trainer)
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=False, special=True)])
    tok.add_tokens(["custom_token", AddedToken("solo", single_word=True)])
    tok.add_special_tokens([AddedToken("<|rs|>", rstrip=True, special=True)])
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    path = tmp / "gpt2.json"
    tok.save(str(path))
    return path


def build_llama2(tmp: Path) -> Path:
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    # Train with a Metaspace split so merges stay inside words, then drop it as Llama 2 does.
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never")
    trainer = trainers.BpeTrainer(
        vocab_size=700, special_tokens=["<unk>", "<s>", "</s>"] + byte_tokens, show_progress=False
    )
    _train(tok, trainer)
    tok.add_tokens(["custom_token", AddedToken("my word", normalized=True)])
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    j = json.loads(tok.to_str())
    j["pre_tokenizer"] = None
    # In Llama 2 the byte pieces are plain vocabulary entries, not added tokens.
    j["added_tokens"] = [t for t in j["added_tokens"] if t["content"] not in byte_tokens]
    path = tmp / "llama2.json"
    path.write_text(json.dumps(j, ensure_ascii=False), encoding="utf-8")
    return path


def build_metaspace(tmp: Path) -> Path:
    """Mistral-style: Metaspace pre-tokenizer (prepend_scheme "first") + Digits, Metaspace decoder."""
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True),
         pre_tokenizers.Digits(individual_digits=True)]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=650, special_tokens=["<unk>", "<s>", "</s>"] + byte_tokens, show_progress=False
    )
    _train(tok, trainer)
    tok.decoder = decoders.Sequence([decoders.Metaspace(replacement="▁", prepend_scheme="first"), decoders.ByteFallback(), decoders.Fuse()])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", tok.token_to_id("<s>")), ("</s>", tok.token_to_id("</s>"))]
    )
    path = tmp / "metaspace.json"
    tok.save(str(path))
    return path


def build_split_variants(tmp: Path) -> Path:
    """Split pre-tokenizers with every behaviour, String and Regex patterns, invert; then ByteLevel."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(" ", behavior="merged_with_next"),
            pre_tokenizers.Split(Regex(r"\p{P}"), behavior="merged_with_previous"),
            pre_tokenizers.Split(Regex(r"\d"), behavior="contiguous"),
            pre_tokenizers.Split(Regex(r"\t"), behavior="removed"),
            pre_tokenizers.Split(Regex(r"[^\n]+"), behavior="isolated", invert=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=500, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    _train(tok, trainer)
    path = tmp / "split_variants.json"
    tok.save(str(path))
    return path


BUILDERS = {"split_variants": build_split_variants, "llama3": build_llama3, "gpt2": build_gpt2, "llama2": build_llama2, "metaspace": build_metaspace}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tok")
    (d / "strings.json").write_text(json.dumps(HARD_STRINGS, ensure_ascii=False), encoding="utf-8")
    return d


def run_leantune(tok_path: Path, strings_path: Path, *flags):
    if not Path(BIN).exists():
        pytest.skip(f"leantune binary not found at {BIN} (set LEANTUNE_BIN)")
    r = subprocess.run(
        [BIN, "tokenize", "--tokenizer", str(tok_path), "--input", str(strings_path), *flags],
        capture_output=True, timeout=120,
    )
    assert r.returncode == 0, r.stderr.decode("utf-8", "replace")
    return json.loads(r.stdout.decode("utf-8"))


@pytest.mark.parametrize("kind", list(BUILDERS))
@pytest.mark.parametrize("add_special", [True, False])
@pytest.mark.parametrize("skip_special", [False, True])
def test_parity(workdir, kind, add_special, skip_special):
    path = workdir / f"{kind}.json"
    if not path.exists():
        BUILDERS[kind](workdir)
    hf = Tokenizer.from_file(str(path))
    flags = ([] if add_special else ["--no-special"]) + (["--skip-special"] if skip_special else [])
    got = run_leantune(path, workdir / "strings.json", *flags)
    assert len(got) == len(HARD_STRINGS)
    mismatches = []
    for s, g in zip(HARD_STRINGS, got):
        ids = hf.encode(s, add_special_tokens=add_special).ids
        dec = hf.decode(ids, skip_special_tokens=skip_special)
        if g["ids"] != ids or g["decoded"] != dec:
            mismatches.append((s, ids, g["ids"], dec, g["decoded"]))
    assert not mismatches, "\n".join(
        f"{s!r}:\n  hf ids  {i}\n  lt ids  {gi}\n  hf text {d!r}\n  lt text {gd!r}" for s, i, gi, d, gd in mismatches[:5]
    )


def test_text_mode_prints_ids(workdir):
    path = workdir / "llama3.json"
    if not path.exists():
        build_llama3(workdir)
    if not Path(BIN).exists():
        pytest.skip(f"leantune binary not found at {BIN}")
    hf = Tokenizer.from_file(str(path))
    r = subprocess.run([BIN, "tokenize", "--tokenizer", str(path), "--text", "Hello world <|eot_id|>"], capture_output=True)
    assert r.returncode == 0, r.stderr
    assert [int(x) for x in r.stdout.split()] == hf.encode("Hello world <|eot_id|>").ids


@pytest.mark.parametrize(
    "content,needle",
    [
        ('{"model": {"type": "WordPiece", "vocab": {}}}', "WordPiece"),
        ('{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}}', "merge"),
        ('{"model": {"type": "BPE", "vocab": {"a": 0', "malformed JSON"),
        ('{"model": {"type": "BPE", "vocab": {"a": 0}}, "pre_tokenizer": {"type": "Nope"}}', "Nope"),
    ],
)
def test_bad_tokenizer_json_names_file(tmp_path, content, needle):
    if not Path(BIN).exists():
        pytest.skip(f"leantune binary not found at {BIN}")
    p = tmp_path / "bad.json"
    p.write_text(content)
    r = subprocess.run([BIN, "tokenize", "--tokenizer", str(p), "--text", "hi"], capture_output=True)
    assert r.returncode == 1
    err = r.stderr.decode()
    assert str(p) in err and needle in err, err

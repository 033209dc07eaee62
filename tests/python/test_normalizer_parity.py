"""Parity of `leantune tokenize` with Hugging Face `tokenizers` for tokenizer.json normalizers.

Trains two small BPE tokenizers in a temporary folder (no downloads): a Qwen2-style byte-level
BPE (Split regex + ByteLevel) and a Llama 2 / Gemma-style SentencePiece BPE with byte fallback.
Each is saved with one normalizer configuration at a time (NFC as Qwen2 has it, NFD, NFKC, NFKD,
Lowercase, StripAccents, Strip, Nmt, BertNormalizer, Prepend/Replace sequences, ByteLevel), and
the ids of strings generated here are compared: text that the Unicode forms change (combining
marks in any order, the Kelvin sign, NFD Hangul, ligatures, full-width forms, compatibility
characters), random mixes of those with a fixed seed, and a sweep over every code point of
planes 0-2 (alone and followed by combining marks) for the Unicode forms.

The random strings leave out letters and digits newer than Unicode 14.0: the regex pre-tokenizer
splits those differently from tokenizers (PCRE2's Unicode tables, see src/tokenizer/regex.h); the
sweep uses a tokenizer without a regex, so it measures normalization alone. U+180E and the other
whitespace characters are in the fixed strings (PCRE2's \\s is rewritten to tokenizers' meaning).
"""
import json
import random
import subprocess
import unicodedata
from pathlib import Path

import pytest

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers  # noqa: E402

QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

FIXED = [
    "cafe\u0301 caf\u00e9 CAFE\u0301",
    "\u212a Kelvin \u212b \u00c5 A\u030a \u2126",
    unicodedata.normalize("NFD", "한국어 문장입니다. 각 갂"),
    "\u1100\u1161\u11a8 \u1100\u1161 \u1112\u1175\u11c2",
    "\ufb01nance \ufb02ow \ufb00 \ufb03 \u0133",
    "\uff21\uff22\uff23\uff11\uff12\uff13\uff01 \uff76\uff9e\uff8a\uff9f",
    "\u2460\u2461 \u00b2\u00b3 \u2153 \u33a1 \u3300 \u2122 \u2026",
    "a\u0301\u0323 a\u0323\u0301 \u1e9b\u0323 q\u0307\u0323",
    "Vi\u1ec7t Nam Vie\u0323\u0302t C\u1ee5 th\u1ec3",
    "\u0915\u093f\u0928\u094d\u0928 \u0645\u064e\u0631\u0652\u062d\u064e\u0628\u064b\u0627 \u05e9\u05b8\u05c1\u05dc\u05d5\u05b9\u05dd",
    "\u0130stanbul \u0130I\u0131i \u03a3\u039f\u03a6\u039f\u03a3 \u00df STRASSE",
    "  \t leading and trailing \u3000\u2003 ",
    "\x01ctrl\x7f \u200bzw\u200dj \ufeffbom \ufffd \u00a0nbsp",
    "\U0001d400\U0001d401 \U0001d7ce \u1d2c \u02b0",
    "\u4e2d\u6587 \u65e5\u672c\u8a9e \uf900 \u2f00 \U0002f800",
    "e\u0301\u0304\u0304o \u0344 \u0958 \u2adc",
    "",
    " ",
    # U+180E is not whitespace for tokenizers' regex engine (PCRE2 counts it; src/tokenizer/regex.h)
    "a\u180eb \u180e c\u180e\u180e!\u180e? \u180e\n x \u180e",
    "".join(chr(c) + "w" for c in [0x9, 0xA, 0xB, 0xC, 0xD, 0x20, 0x85, 0xA0, 0x1680, 0x180E, 0x2000, 0x2001, 0x2002,
                                   0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200A, 0x200B, 0x2028,
                                   0x2029, 0x202F, 0x205F, 0x3000, 0xFEFF]),
]

# Code point pools for the random mixes: (first, last) inclusive.
POOLS = [
    (0x41, 0x5A), (0x61, 0x7A), (0x30, 0x39), (0x20, 0x20), (0x20, 0x20),
    (0x300, 0x36F), (0x591, 0x5C7), (0x64B, 0x652), (0x93C, 0x94D), (0x1AB0, 0x1ABE), (0x20D0, 0x20F0),
    (0xC0, 0x17F), (0x1E00, 0x1EFF), (0x1F00, 0x1FFE), (0x386, 0x3CE),
    (0x1100, 0x1112), (0x1161, 0x1175), (0x11A8, 0x11C2), (0xAC00, 0xAC40),
    (0xFB00, 0xFB06), (0xFF01, 0xFF5E), (0xFF61, 0xFF9F), (0x2460, 0x2473), (0x3300, 0x3357), (0x2150, 0x218B),
    (0x1D400, 0x1D4FF), (0xF900, 0xF9FF), (0x2F800, 0x2F8FF), (0x2000, 0x200F), (0x3000, 0x3000),
    (0x212A, 0x212B), (0x2126, 0x2126), (0x130, 0x131), (0x1C4, 0x1CC), (0x390, 0x3B0),
]


def random_strings(n=400, seed=1234):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(1, 40)
        chars = []
        for _ in range(k):
            lo, hi = rng.choice(POOLS)
            chars.append(chr(rng.randint(lo, hi)))
        out.append("".join(chars))
    return out


def sweep_strings():
    """Every code point of planes 0-2, 64 at a time; every other chunk interleaves combining marks."""
    cps = [c for c in range(0x30000) if not 0xD800 <= c <= 0xDFFF]
    marks = ["\u0301", "\u0323", "\u0308", "\u093c", "\u05b0"]
    out = []
    for i in range(0, len(cps), 64):
        chunk = [chr(c) for c in cps[i : i + 64]]
        if (i // 64) % 2:
            chunk = [c + marks[j % len(marks)] for j, c in enumerate(chunk)]
        out.append("".join(chunk))
    return out


CORPUS = [unicodedata.normalize(f, s) for f in ("NFC", "NFD", "NFKC") for s in FIXED + random_strings(300, 7)] * 3


def train_byte_level(no_regex=False):
    tok = Tokenizer(models.BPE())
    split = [] if no_regex else [pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated")]
    tok.pre_tokenizer = pre_tokenizers.Sequence(split + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=900, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer)
    tok.add_tokens([AddedToken("caf\u00e9", normalized=True), AddedToken("\u212a!", normalized=False)])
    return tok


def train_sentencepiece():
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="never")
    trainer = trainers.BpeTrainer(vocab_size=800, special_tokens=["<unk>", "<s>", "</s>"] + byte_tokens, show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.pre_tokenizer = None
    return tok


N = normalizers
SP_REPLACE = [N.Prepend("\u2581"), N.Replace(" ", "\u2581")]
CONFIGS = {
    # name: (base tokenizer, normalizer)
    "nfc": ("byte_level", N.NFC()),  # Qwen2
    "nfd": ("byte_level", N.NFD()),
    "nfkc": ("byte_level", N.NFKC()),
    "nfkd": ("byte_level", N.NFKD()),
    "lowercase": ("byte_level", N.Lowercase()),
    "nfd_strip_accents_lower": ("byte_level", N.Sequence([N.NFD(), N.StripAccents(), N.Lowercase()])),
    "nfkd_strip_accents": ("byte_level", N.Sequence([N.NFKD(), N.StripAccents()])),
    "strip": ("byte_level", N.Strip()),
    "strip_left": ("byte_level", N.Strip(left=True, right=False)),
    "nmt_nfkc": ("byte_level", N.Sequence([N.Nmt(), N.NFKC()])),
    "bert": ("byte_level", N.BertNormalizer()),
    "bert_keep_accents": ("byte_level", N.BertNormalizer(strip_accents=False, lowercase=True)),
    "bert_no_clean": ("byte_level", N.BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=True, lowercase=False)),
    "replace_regex_nfkc": ("byte_level", N.Sequence([N.NFKC(), N.Replace(Regex(r"\s+"), " "), N.Lowercase()])),
    "sp_nfkc": ("sentencepiece", N.Sequence([N.NFKC()] + SP_REPLACE)),  # Gemma-like with NFKC
    "sp_nfc": ("sentencepiece", N.Sequence([N.NFC()] + SP_REPLACE)),
    "sp_phi3": ("sentencepiece", N.Sequence(SP_REPLACE)),  # Phi-3 / Llama 2 tokenizer.json exactly
    "sp_nfd_lower": ("sentencepiece", N.Sequence(SP_REPLACE + [N.NFD(), N.Lowercase()])),
    "byte_level_normalizer": ("no_pretokenizer", N.ByteLevel()),
}
SWEEP_CONFIGS = ["nfc", "nfd", "nfkc", "nfkd", "nfd_strip_accents_lower", "bert"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("norm")
    bases = {"byte_level": train_byte_level(), "sentencepiece": train_sentencepiece()}
    sweep_base = train_byte_level(no_regex=True)
    for name, (base, norm) in CONFIGS.items():
        if base == "no_pretokenizer":
            tok = Tokenizer.from_str(bases["byte_level"].to_str())
            tok.pre_tokenizer = None
        else:
            tok = Tokenizer.from_str(bases[base].to_str())
        tok.normalizer = norm
        tok.save(str(d / f"{name}.json"))
        if name in SWEEP_CONFIGS:
            sweep = Tokenizer.from_str(sweep_base.to_str())
            sweep.normalizer = norm
            sweep.save(str(d / f"sweep_{name}.json"))
    strings = FIXED + random_strings() + [s + "\u212a!" + s for s in FIXED[:4]]
    (d / "strings.json").write_text(json.dumps(strings, ensure_ascii=False), encoding="utf-8")
    (d / "sweep.json").write_text(json.dumps(sweep_strings(), ensure_ascii=False), encoding="utf-8")
    return d


def leantune_ids(leantune_bin, tok_path, strings_path):
    r = subprocess.run(
        [leantune_bin, "tokenize", "--tokenizer", str(tok_path), "--input", str(strings_path), "--no-special"],
        capture_output=True, timeout=600,
    )
    assert r.returncode == 0, r.stderr.decode("utf-8", "replace")
    return [g["ids"] for g in json.loads(r.stdout.decode("utf-8"))]


def compare(leantune_bin, tok_path, strings_path):
    strings = json.loads(strings_path.read_text(encoding="utf-8"))
    hf = Tokenizer.from_file(str(tok_path))
    got = leantune_ids(leantune_bin, tok_path, strings_path)
    assert len(got) == len(strings)
    bad = []
    for s, g in zip(strings, got):
        want = hf.encode(s, add_special_tokens=False).ids
        if g != want:
            bad.append((s, want, g))
    assert not bad, f"{len(bad)} of {len(strings)} strings differ; first:\n" + "\n".join(
        f"{s!r} ({' '.join('%04X' % ord(c) for c in s[:12])}...)\n  tokenizers {w[:20]}\n  leantune   {g[:20]}"
        for s, w, g in bad[:3]
    )


@pytest.mark.parametrize("name", list(CONFIGS))
def test_normalizer_ids_match_tokenizers(leantune_bin, workdir, name):
    compare(leantune_bin, workdir / f"{name}.json", workdir / "strings.json")


@pytest.mark.parametrize("name", SWEEP_CONFIGS)
def test_every_code_point_matches_tokenizers(leantune_bin, workdir, name):
    compare(leantune_bin, workdir / f"sweep_{name}.json", workdir / "sweep.json")


def test_the_issue_examples_change_ids(leantune_bin, workdir):
    """NFC makes these equal to their composed forms: the ids must differ from no normalizer's."""
    path = workdir / "nfc.json"
    pairs = [("cafe\u0301", "caf\u00e9"), ("\u212a", "K"), (unicodedata.normalize("NFD", "한국어"), "한국어")]
    strings = [s for p in pairs for s in p]
    sp = workdir / "issue.json"
    sp.write_text(json.dumps(strings, ensure_ascii=False), encoding="utf-8")
    got = leantune_ids(leantune_bin, path, sp)
    for i in range(0, len(got), 2):
        assert got[i] == got[i + 1], (strings[i], got[i], got[i + 1])


def test_unsupported_normalizer_is_named(leantune_bin, tmp_path):
    p = tmp_path / "bad.json"
    tok = json.loads(train_sentencepiece().to_str())
    tok["normalizer"] = {"type": "Precompiled", "precompiled_charsmap": "AAAA"}
    p.write_text(json.dumps(tok))
    r = subprocess.run([leantune_bin, "tokenize", "--tokenizer", str(p), "--text", "hi"], capture_output=True)
    assert r.returncode == 1
    err = r.stderr.decode()
    assert str(p) in err and "Precompiled" in err and "NFKC" in err, err

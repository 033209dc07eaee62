"""Model paths as Hugging Face repo ids, resolved in the local cache and never downloaded.

The test lays out a cache as huggingface_hub does — models--org--name/{blobs/<sha256>,
snapshots/<commit>/<file> -> ../../blobs/<sha256>, refs/<branch or tag>} — holding two revisions
of a small random model (transformers' save_pretrained) with a tokenizer and a chat template, and
loads it by repo id: the default branch, a tag and a commit hash give the logits of the folders
they were made from, bit for bit. A missing repo or revision is an error that says where it looked
and the command that would fetch it; a real path always wins over a repo id.
"""
import hashlib
import json
import os
import shutil
import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from test_model_parity import build  # noqa: E402

COMMIT1 = "1" * 8 + "a" * 32
COMMIT2 = "2" * 8 + "b" * 32
IDS = [1, 5, 9, 2, 7, 3]


def save_model(folder, seed):
    build("smollm2", seed=seed).save_pretrained(folder, safe_serialization=True)
    from tokenizers import Tokenizer, models, pre_tokenizers
    tok = Tokenizer(models.BPE(vocab={chr(97 + i): i for i in range(26)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel()
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "a", "chat_template": f"rev{seed}:{{% for m in messages %}}{{{{ m.content }}}}{{% endfor %}}"}))


def add_snapshot(repo_dir, folder, commit):
    for f in sorted(folder.iterdir()):
        data = f.read_bytes()
        sha = hashlib.sha256(data).hexdigest()
        blob = repo_dir / "blobs" / sha
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = repo_dir / "snapshots" / commit / f.name
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.join("..", "..", "blobs", sha), link)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    v1, v2 = root / "v1", root / "v2"
    save_model(v1, 1)
    save_model(v2, 2)
    hub = root / "hub"
    repo = hub / "models--tiny-org--Tiny-LM.v0"
    add_snapshot(repo, v1, COMMIT1)
    add_snapshot(repo, v2, COMMIT2)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT1)  # huggingface_hub writes the hash without a newline
    (repo / "refs" / "v2.0").write_text(COMMIT2 + "\n")
    return {"hub": hub, "v1": v1, "v2": v2}


def run(leantune_bin, args, env_extra, cwd=None):
    env = dict(os.environ)
    for k in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        env.pop(k, None)
    env.update(env_extra)
    return subprocess.run([leantune_bin, *args], capture_output=True, text=True, env=env, cwd=cwd)


def logits(leantune_bin, model, out, env, cwd=None):
    r = run(leantune_bin, ["logits", "--model", str(model), "--ids", ",".join(map(str, IDS)), "--out", str(out)], env, cwd)
    assert r.returncode == 0, r.stderr
    return np.fromfile(out, dtype=np.float32)


@pytest.mark.parametrize("env_kind", ["HF_HUB_CACHE", "HF_HOME", "HOME"])
def test_repo_id_loads_the_cached_snapshot(leantune_bin, tmp_path, cache, env_kind):
    hub = cache["hub"]
    if env_kind == "HF_HUB_CACHE":
        env = {"HF_HUB_CACHE": str(hub)}
    else:  # $HF_HOME/hub, and ~/.cache/huggingface/hub
        home = tmp_path / "home"
        target = home / "hf" if env_kind == "HF_HOME" else home / ".cache" / "huggingface"
        target.mkdir(parents=True)
        os.symlink(hub, target / "hub")
        env = {"HF_HOME": str(home / "hf")} if env_kind == "HF_HOME" else {"HOME": str(home)}
    want1 = logits(leantune_bin, cache["v1"], tmp_path / "a.f32", env)
    want2 = logits(leantune_bin, cache["v2"], tmp_path / "b.f32", env)
    assert not np.array_equal(want1, want2)
    for repo_id, want in [("tiny-org/Tiny-LM.v0", want1), ("tiny-org/Tiny-LM.v0@main", want1),
                          ("tiny-org/Tiny-LM.v0@v2.0", want2), (f"tiny-org/Tiny-LM.v0@{COMMIT2}", want2),
                          (f"tiny-org/Tiny-LM.v0@{COMMIT1}", want1)]:
        got = logits(leantune_bin, repo_id, tmp_path / "c.f32", env)
        assert np.array_equal(got, want), repo_id


def test_tokenizer_and_chat_template_by_repo_id(leantune_bin, tmp_path, cache):
    env = {"HF_HUB_CACHE": str(cache["hub"])}
    msgs = tmp_path / "m.json"
    msgs.write_text(json.dumps([{"role": "user", "content": "xyz"}]))
    for rev, want in [("", "rev1:xyz"), ("@v2.0", "rev2:xyz")]:
        r = run(leantune_bin, ["chat-template", "--tokenizer", "tiny-org/Tiny-LM.v0" + rev, "--messages", str(msgs)], env)
        assert r.returncode == 0, r.stderr
        assert r.stdout == want
    r = run(leantune_bin, ["tokenize", "--tokenizer", "tiny-org/Tiny-LM.v0", "--text", "abc", "--no-special"], env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "1", "2"]


def test_missing_repo_or_revision_says_where_it_looked(leantune_bin, tmp_path, cache):
    env = {"HF_HUB_CACHE": str(cache["hub"])}
    r = run(leantune_bin, ["logits", "--model", "tiny-org/Absent-Model", "--ids", "1,2", "--out", str(tmp_path / "x")], env)
    assert r.returncode != 0
    msg = r.stderr
    assert "tiny-org/Absent-Model" in msg and str(cache["hub"]) in msg, msg
    assert "models--tiny-org--Absent-Model" in msg, msg
    assert "hf download tiny-org/Absent-Model" in msg and "huggingface-cli download tiny-org/Absent-Model" in msg, msg
    assert "never downloads" in msg, msg
    r = run(leantune_bin, ["generate", "--model", "tiny-org/Tiny-LM.v0@v9", "-p", "a", "-n", "1"], env)
    assert r.returncode != 0
    assert "revision v9" in r.stderr and "--revision v9" in r.stderr and "refs" in r.stderr, r.stderr


def test_an_existing_path_wins_over_a_repo_id(leantune_bin, tmp_path, cache):
    env = {"HF_HUB_CACHE": str(cache["hub"])}
    local = tmp_path / "tiny-org" / "Tiny-LM.v0"
    shutil.copytree(cache["v2"], local)
    want2 = logits(leantune_bin, cache["v2"], tmp_path / "b.f32", env)
    got = logits(leantune_bin, "tiny-org/Tiny-LM.v0", tmp_path / "c.f32", env, cwd=tmp_path)
    assert np.array_equal(got, want2)  # the folder in the working directory, not the cache's main (v1)

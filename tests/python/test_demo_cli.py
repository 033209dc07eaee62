# `leantune demo` (scripts/demo.sh, the README's first command): by default stories260K LoRA-tuned on
# Aesop's fables from the shared folder, showing the plan, the held-out loss before and after, one
# prompt answered before and after, and report.html; --synthetic needs no files; without the shared
# files the message says where it looked and what else to run.
import os
import re
import subprocess

import pytest


def demo(leantune_bin, *args, env=None, cwd=None):
    return subprocess.run([leantune_bin, "demo", *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "OMP_NUM_THREADS": "2", **(env or {})}, timeout=600)


def test_default_demo_fine_tunes_stories260k_on_aesop(leantune_bin, shared_dir, tmp_path):
    r = demo(leantune_bin, "--dir", tmp_path / "d", "--lora-steps", "8", "--threads", "2",
             env={"LEANTUNE_SHARED": str(shared_dir)})
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "stories260K" in out and "Aesop" in out and "memory plan" in out
    m = re.search(r"held-out loss (\d+\.\d+) -> (\d+\.\d+)", out)
    assert m, out
    assert float(m.group(2)) < float(m.group(1)) - 0.2, m.group(0)
    summary = out[out.index("== what 8 LoRA steps changed"):]
    before = re.search(r"before: +(.*)", summary).group(1)
    after = re.search(r"after: +(.*)", summary).group(1)
    assert before.startswith("One day a hungry Fox") and after.startswith("One day a hungry Fox") and before != after
    report = re.search(r"report: +(\S+report\.html)", summary).group(1)
    assert os.path.exists(report) and os.path.isdir(tmp_path / "d" / "lora" / "adapter")


def test_synthetic_demo_needs_no_files(leantune_bin, tmp_path):
    r = demo(leantune_bin, "--synthetic", "--dir", tmp_path / "d", "--pretrain-steps", "3", "--lora-steps", "2",
             "--threads", "2", env={"LEANTUNE_SHARED": str(tmp_path / "nothing")}, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "after phase 2" in r.stdout and (tmp_path / "d" / "lora" / "adapter").is_dir()


def test_demo_without_the_shared_files_says_where_it_looked(leantune_bin, tmp_path):
    r = demo(leantune_bin, "--dir", tmp_path / "d", env={"LEANTUNE_SHARED": str(tmp_path / "nothing")}, cwd=tmp_path)
    assert r.returncode != 0
    assert str(tmp_path / "nothing") in r.stderr and "--synthetic" in r.stderr and "LEANTUNE_SHARED" in r.stderr
    r = demo(leantune_bin, "--synthetic", "--model", "m.bin", "--dir", tmp_path / "d", cwd=tmp_path)
    assert r.returncode != 0 and "--synthetic" in r.stderr
    r = demo(leantune_bin, "--model", "m.bin", "--dir", tmp_path / "d", cwd=tmp_path)
    assert r.returncode != 0 and "--data" in r.stderr

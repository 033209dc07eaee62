#!/usr/bin/env python3
"""Compares two folders of golden runs (scripts/golden_runs.sh): per run, whether the per-step
training losses (metrics.jsonl), the eval losses and the trained tensors' sha256 are bit-identical,
and otherwise the largest relative difference of a training / eval loss.
Usage: scripts/golden_compare.py BEFORE_DIR AFTER_DIR"""
import json
import sys
from pathlib import Path


def losses(path):
    train, ev = {}, {}
    for line in path.read_text().splitlines():
        j = json.loads(line)
        if "loss" in j:
            train[j["step"]] = j["loss"]
        if "eval_loss" in j:
            ev[j["step"]] = j["eval_loss"]
    return train, ev


def max_rel(a, b):
    keys = sorted(set(a) & set(b))
    if len(keys) != len(a) or len(keys) != len(b):
        return float("inf")
    return max((abs(a[k] - b[k]) / max(abs(a[k]), 1e-30) for k in keys), default=0.0)


def main(before, after):
    changed = 0
    for m in sorted(Path(before).glob("*.metrics.jsonl")):
        name = m.name[: -len(".metrics.jsonl")]
        n = Path(after) / m.name
        if not n.exists():
            print(f"{name:34} MISSING after")
            changed += 1
            continue
        (ta, ea), (tb, eb) = losses(m), losses(n)
        same_w = (Path(before) / f"{name}.sha256").read_text() == (Path(after) / f"{name}.sha256").read_text()
        same_l = (Path(before) / f"{name}.losses.json").read_text() == (Path(after) / f"{name}.losses.json").read_text()
        if ta == tb and ea == eb and same_w and same_l:
            print(f"{name:34} bit-identical (losses, eval losses, weights)")
        else:
            changed += 1
            print(f"{name:34} CHANGED: max rel train loss diff {max_rel(ta, tb):.3e}, eval {max_rel(ea, eb):.3e}, "
                  f"weights {'same' if same_w else 'differ'}")
    return changed


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

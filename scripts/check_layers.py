#!/usr/bin/env python3
"""Lists includes that go against the module floors (docs/ARCHITECTURE.md): a module may include
only modules on lower floors. The build enforces the same order through per-module CMake targets;
this script names every offending line at once. The front ends (tools/, the Python extension in
python/src) include only the public API, leantune/. Exit 1 when any is found."""
import os, re, sys

FLOOR = {"core": 0, "kernels": 1, "quant": 2, "io": 3, "tokenizer": 3, "model": 4, "train": 5,
         "infer": 5, "dist": 6, "plan": 6, "api": 7}
root = sys.argv[1] if len(sys.argv) > 1 else "."
bad = []
for d, _, files in os.walk(os.path.join(root, "src")):
    for f in files:
        p = os.path.join(d, f)
        mod = os.path.relpath(p, os.path.join(root, "src")).split(os.sep)[0]
        for n, line in enumerate(open(p, errors="replace"), 1):
            m = re.match(r'\s*#\s*include\s+"([a-z_]+)/', line)
            if m and m.group(1) in FLOOR and m.group(1) != mod and FLOOR[m.group(1)] >= FLOOR[mod]:
                bad.append(f"{os.path.relpath(p, root)}:{n}: {mod} includes {m.group(1)}: {line.strip()}")
for d, _, files in [*os.walk(os.path.join(root, "tools")), *os.walk(os.path.join(root, "python", "src"))]:
    for f in files:
        p = os.path.join(d, f)
        for n, line in enumerate(open(p, errors="replace"), 1):
            m = re.match(r'\s*#\s*include\s+"(([a-z_]+)/[^"]*)"', line)
            local = m and os.path.exists(os.path.join(d, m.group(1)))  # the tool's own folder (tools/leantune/server)
            if m and not local and m.group(2) != "leantune" and not p.startswith(os.path.join(root, "tools", "fault")):
                bad.append(f"{os.path.relpath(p, root)}:{n}: front ends include only leantune/: {line.strip()}")
print("\n".join(bad) if bad else "module floors: no include goes up or sideways")
sys.exit(1 if bad else 0)

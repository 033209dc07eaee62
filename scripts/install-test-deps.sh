#!/usr/bin/env bash
# Creates .venv with the Python packages the tests use as oracles (PyPI only; no model downloads).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
if ! .venv/bin/python -c "import torch, transformers, tokenizers, safetensors, numpy, peft" 2>/dev/null; then
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q numpy torch transformers tokenizers safetensors peft pytest
fi

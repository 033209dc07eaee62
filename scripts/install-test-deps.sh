#!/usr/bin/env bash
# Installs what the tests need beyond the build: Debian's chromium (renders the HTML reports
# headless) and .venv with the Python packages the tests use as oracles (jinja2 is the oracle of
# the chat template tests), and what building the Python package needs (scikit-build-core,
# nanobind; scripts/test.sh installs the package into .venv) — PyPI only; no model downloads.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
if ! dpkg -s chromium >/dev/null 2>&1; then
  echo "installing: chromium"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium
fi
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
if ! .venv/bin/python -c "import torch, transformers, tokenizers, safetensors, numpy, peft, bitsandbytes, gguf, openai, tqdm, nanobind, scikit_build_core, jinja2" 2>/dev/null; then
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q numpy torch transformers tokenizers safetensors peft bitsandbytes gguf pytest openai tqdm \
    nanobind scikit-build-core jinja2
fi

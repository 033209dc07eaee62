#!/usr/bin/env bash
# The peer harness in one command on a fresh Debian machine: builds leantune, installs the peers
# from PyPI into .venv (torch, transformers, peft, bitsandbytes via scripts/install-test-deps.sh;
# llama-cpp-python, compiled from its source package, and gguf here), then times both engines on
# identical workloads (bench/peers/peers.py; its flags pass through, e.g. --quick).
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/build.sh
bash scripts/install-test-deps.sh
if ! .venv/bin/python -c "import llama_cpp, gguf" 2>/dev/null; then
  echo "installing llama-cpp-python (builds llama.cpp from source: several minutes) and gguf"
  .venv/bin/pip install -q llama-cpp-python gguf
fi
exec .venv/bin/python bench/peers/peers.py "$@"

#!/usr/bin/env bash
# The main job on a small default: build, then greedily generate a story with the stories260K
# model from ../shared (Karpathy's tinyllamas, llama2.c format).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
SHARED=${LEANTUNE_SHARED:-../shared}
build/bin/leantune generate --model "$SHARED/models/stories260K/stories260K.bin" \
  --tokenizer "$SHARED/models/stories260K/tok512.bin" --temperature 0 --max-new-tokens 200 "$@"

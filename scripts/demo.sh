#!/usr/bin/env bash
# The main job on a small default: build, then `leantune demo` — train a tiny Llama from scratch
# on synthetic sums, LoRA-tune it on a shifted task, with memory plans, progress and samples —
# then greedily generate a story with the real stories260K model from ../shared.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
build/bin/leantune demo --dir build/demo "$@"
SHARED=${LEANTUNE_SHARED:-../shared}
if [ -f "$SHARED/models/stories260K/stories260K.bin" ]; then
  echo; echo "== stories260K, greedy:"
  build/bin/leantune generate --model "$SHARED/models/stories260K/stories260K.bin" \
    --tokenizer "$SHARED/models/stories260K/tok512.bin" --temperature 0 --max-new-tokens 200
fi

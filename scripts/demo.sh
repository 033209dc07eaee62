#!/usr/bin/env bash
# The main job on a small default: build, then `leantune demo` — stories260K (a 260K-parameter
# Llama that has read only children's stories) LoRA-tuned on Aesop's fables from ../shared in well
# under a minute: the memory plan, the progress bar, the held-out loss and one prompt's greedy
# answer before and after, and the path of report.html.
#   scripts/demo.sh --synthetic   a tiny Llama trained from scratch on synthetic sums instead (no files)
#   scripts/demo.sh --lora-steps 80 --prompt "A Lion"   any other `leantune demo` flag is passed on
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
export LEANTUNE_SHARED=${LEANTUNE_SHARED:-$(cd .. && pwd)/shared}
build/bin/leantune demo --dir build/demo "$@"

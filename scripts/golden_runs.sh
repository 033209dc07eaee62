#!/usr/bin/env bash
# Golden training runs: short fine-tunes of stories260K on Aesop's fables (LoRA and full, fp32 /
# bf16 / fp16, QLoRA NF4; micro-batch 8 x 1, 4 x 2, 2 x 4; ZeRO on 1 and 2 ranks; a run killed
# with SIGKILL and resumed), one thread each so they are deterministic. Each run's metrics.jsonl,
# final trainer_state.json losses and the sha256 of its trained tensors go to OUT/<run>.*, so the
# same runs repeated after a change can be compared with scripts/golden_compare.py.
# Usage: scripts/golden_runs.sh OUT_DIR [LEANTUNE_BIN] [SHARED_DIR]   (GOLDEN_ONLY=REGEX: those runs only)
set -euo pipefail
OUT=${1:?usage: scripts/golden_runs.sh OUT_DIR [LEANTUNE_BIN] [SHARED_DIR]}
BIN=${2:-$PWD/build/bin/leantune}
SHARED=${3:-/work/shared}
STEPS=${GOLDEN_STEPS:-20}
ONLY=${GOLDEN_ONLY:-.}
mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cat > "$WORK/base.yaml" <<EOF
base_model: $SHARED/models/stories260K/stories260K.bin
tokenizer: $SHARED/models/stories260K/tok512.bin
datasets:
  - path: $SHARED/data/aesop_fables/aesop_fables.txt
    min_blank_lines: 2
val_set_size: 0.1
lora_r: 8
lora_alpha: 16
lora_target_modules: all-linear
sequence_len: 128
learning_rate: 3e-3
lr_scheduler: cosine
warmup_steps: 2
max_steps: $STEPS
eval_steps: 10
save_steps: 0
logging_steps: 100
threads: 1
EOF

# collect NAME DIR: metrics, final losses and the trained tensors' hash into OUT
collect() {
  local name=$1 dir=$2
  cp "$dir/metrics.jsonl" "$OUT/$name.metrics.jsonl"
  python3 -c 'import json,sys; d=sys.argv[1]; l=open(d+"/LATEST").read().strip();
print(json.dumps(json.load(open(d+"/"+l+"/trainer_state.json"))["losses"]))' "$dir" > "$OUT/$name.losses.json" 2>/dev/null \
    || echo null > "$OUT/$name.losses.json"
  (cd "$dir" && sha256sum $(ls adapter/*.safetensors model/*.safetensors 2>/dev/null) || true) > "$OUT/$name.sha256"
}

# run NAME ARGS...: one single-process run
run() {
  local name=$1; shift
  [[ $name =~ $ONLY ]] || return 0
  local dir="$WORK/$name"
  "$BIN" train "$WORK/base.yaml" --output_dir "$dir" "$@" > "$OUT/$name.log" 2>&1 || { echo "FAILED: $name"; tail -5 "$OUT/$name.log"; return 1; }
  collect "$name" "$dir"
  echo "ok: $name"
}

for m in lora full; do
  for p in fp32 bf16; do
    run "${m}_${p}_mb8x1" --method $m --precision $p --micro_batch_size 8 --gradient_accumulation_steps 1
    run "${m}_${p}_mb4x2" --method $m --precision $p --micro_batch_size 4 --gradient_accumulation_steps 2
  done
done
run full_fp32_mb2x4 --method full --micro_batch_size 2 --gradient_accumulation_steps 4
run lora_fp16_mb8x1 --method lora --precision fp16 --micro_batch_size 8 --gradient_accumulation_steps 1
run lora_fp16_mb4x2 --method lora --precision fp16 --micro_batch_size 4 --gradient_accumulation_steps 2
run qlora_nf4_mb8x1 --method lora --quantization nf4 --micro_batch_size 8 --gradient_accumulation_steps 1
run qlora_nf4_mb4x2 --method lora --quantization nf4 --micro_batch_size 4 --gradient_accumulation_steps 2
# no packing: one fable per row, so rows carry very different label counts
run full_fp32_nopack_mb8x1 --method full --sample_packing false --micro_batch_size 8 --gradient_accumulation_steps 1
run full_fp32_nopack_mb4x2 --method full --sample_packing false --micro_batch_size 4 --gradient_accumulation_steps 2
# ZeRO: one process, then two ranks of micro-batch 4 (a global batch of 8)
run zero1_full_fp32_1rank_mb8x1 --method full --zero_stage 1 --micro_batch_size 8 --gradient_accumulation_steps 1
name=zero1_full_fp32_2ranks_mb4x1
if command -v mpirun > /dev/null && [[ $name =~ $ONLY ]]; then
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 2 --oversubscribe "$BIN" train "$WORK/base.yaml" \
    --output_dir "$WORK/$name" --method full --zero_stage 1 --micro_batch_size 4 --gradient_accumulation_steps 1 \
    > "$OUT/$name.log" 2>&1 && { collect $name "$WORK/$name"; echo "ok: $name"; } || echo "FAILED: $name"
fi

# SIGKILL mid-run, then resume: the resumed losses must equal the uninterrupted run's
name=full_fp32_mb8x1_killed_resumed
[[ $name =~ $ONLY ]] || exit 0
dir="$WORK/$name"
args=(--method full --micro_batch_size 8 --gradient_accumulation_steps 1 --save_steps 2)
# leantune_fault_train (built next to leantune with the tests) slows each step so the kill lands mid-run
"$(dirname "$BIN")/leantune_fault_train" "$WORK/base.yaml" --fault-sleep-ms 150 --output_dir "$dir" "${args[@]}" \
  > "$OUT/$name.log" 2>&1 &
pid=$!
for _ in $(seq 1 1200); do
  [[ -f "$dir/LATEST" ]] && [[ "$(cat "$dir/LATEST")" =~ ^checkpoint-(6|8|10)$ ]] && break
  sleep 0.05
done
kill -9 $pid 2>/dev/null || true
wait $pid 2>/dev/null || true
echo "killed at $(cat "$dir/LATEST")" >> "$OUT/$name.log"
"$BIN" train "$WORK/base.yaml" --output_dir "$dir" "${args[@]}" --resume auto >> "$OUT/$name.log" 2>&1
collect "$name" "$dir"
echo "ok: $name ($(grep 'killed at' "$OUT/$name.log"))"

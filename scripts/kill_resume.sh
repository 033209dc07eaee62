#!/usr/bin/env bash
# kill_resume.sh [N]: SIGKILL the real `leantune train` at N random moments of a LoRA run and of a
# full fine-tuning run (stories260K on Aesop's fables, 36 steps, a checkpoint every 3), resuming
# with --resume auto after each kill, and check that every interrupted run ends exactly as an
# uninterrupted one: the same final losses (trainer_state.json), the same metrics.jsonl records
# (all fields but the wall-clock ones: tokens_per_s, rss_bytes) and the same adapter / model bytes.
# Kill moments are uniform over the uninterrupted run's wall time (start-up, steps, checkpoint
# writes, final outputs); when a run completes before N kills, a new one starts (a "cycle").
# Env: LEANTUNE_BIN, LEANTUNE_SHARED, KILL_RESUME_SEED (default: random; printed). Exit 1 on a mismatch.
set -u
N=${1:-50}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${LEANTUNE_BIN:-$ROOT/build/bin/leantune}
SHARED=${LEANTUNE_SHARED:-$ROOT/../shared}
SEED=${KILL_RESUME_SEED:-$(( $(date +%s) % 100000 ))}
RANDOM=$SEED
WORK=$(mktemp -d /tmp/lt_kill_resume.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
[ -x "$BIN" ] || { echo "kill_resume: $BIN not found (build first or set LEANTUNE_BIN)"; exit 1; }
export OMP_NUM_THREADS=1

train_args() {  # mode out
  local extra=(--lora_target_modules all-linear --lora_r 8 --lora_alpha 16 --learning_rate 2e-3)
  [ "$1" = full ] && extra=(--learning_rate 5e-4)
  echo --base_model "$SHARED/models/stories260K/stories260K.bin" --tokenizer "$SHARED/models/stories260K/tok512.bin" \
    --datasets "$SHARED/data/aesop_fables/aesop_fables.txt" --min_blank_lines 2 --method "$1" "${extra[@]}" \
    --micro_batch_size 4 --sequence_len 128 --max_steps 36 --save_steps 3 --eval_steps 10 --eval_batches 2 \
    --lr_scheduler cosine --warmup_steps 3 --threads 1 --output_dir "$2"
}

# compare REF OUT MODE: prints "ok RECORDS" or the first difference
compare() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys, pathlib
ref, out, mode = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
def records(d):
    recs = [json.loads(l) for l in (d / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in ("tokens_per_s", "rss_bytes", "comm_bytes_per_step")} for r in recs]
def losses(d):
    return json.loads((d / (d / "LATEST").read_text() / "trainer_state.json").read_text())["losses"]
weights = "adapter/adapter_model.safetensors" if mode == "lora" else "model/model.safetensors"
a, b = records(ref), records(out)
if losses(ref) != losses(out):
    print("final losses differ"); sys.exit(1)
if a != b:
    diff = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    print(f"metrics.jsonl differs at record {diff}: {a[diff] if diff < len(a) else None} vs "
          f"{b[diff] if diff < len(b) else None} ({len(a)} vs {len(b)} records)"); sys.exit(1)
if (ref / weights).read_bytes() != (out / weights).read_bytes():
    print(f"{weights} differs"); sys.exit(1)
stray = [p.name for p in out.iterdir() if ".tmp." in p.name]
if stray:
    print(f"temporary files left: {stray}"); sys.exit(1)
print(f"ok {len(a)}")
PY
}

now() { date +%s.%N; }
FAILED=0
SUMMARY=()
for MODE in lora full; do
  REF="$WORK/$MODE-ref"
  T0=$(now)
  # shellcheck disable=SC2046
  "$BIN" train $(train_args $MODE "$REF") > "$WORK/ref.log" 2>&1 || { cat "$WORK/ref.log"; echo "FAIL: the $MODE reference run failed"; exit 1; }
  D=$(awk -v a="$T0" -v b="$(now)" 'BEGIN { print b - a }')
  kills=0 cycles=0 launches=0 bad=0 at_start=0 mid=0 at_end=0
  while [ $kills -lt "$N" ]; do
    OUT="$WORK/$MODE-$cycles"
    rm -rf "$OUT"
    while :; do  # one cycle: launch, maybe kill, until a launch completes
      launches=$((launches + 1))
      # shellcheck disable=SC2046
      "$BIN" train $(train_args $MODE "$OUT") --resume auto > "$WORK/run.log" 2>&1 &
      PID=$!
      if [ $kills -lt "$N" ]; then
        sleep "$(awk -v d="$D" -v r=$RANDOM 'BEGIN { printf "%.3f", d * r / 32767 }')"
        if kill -9 "$PID" 2>/dev/null; then
          wait "$PID" 2>/dev/null
          kills=$((kills + 1))
          last=$(tail -n 1 "$OUT/metrics.jsonl" 2>/dev/null | python3 -c 'import json,sys; print(json.loads(sys.stdin.read() or "{}").get("step", -1))' 2>/dev/null || echo -1)
          if [ ! -f "$OUT/LATEST" ]; then at_start=$((at_start + 1))
          elif [ "$last" = 36 ]; then at_end=$((at_end + 1))
          else mid=$((mid + 1)); fi
          continue
        fi
      fi
      wait "$PID"; RC=$?
      [ $RC -eq 0 ] || { echo "FAIL: a $MODE run exited $RC:"; tail -n 20 "$WORK/run.log"; bad=$((bad + 1)); break; }
      break
    done
    RES=$(compare "$REF" "$OUT" "$MODE") || { echo "FAIL: $MODE cycle $cycles: $RES"; bad=$((bad + 1)); }
    cycles=$((cycles + 1))
    rm -rf "$OUT"
  done
  [ $bad -eq 0 ] || FAILED=1
  SUMMARY+=("$MODE: $kills SIGKILLs over $cycles runs ($launches launches; killed before the first checkpoint $at_start, between checkpoints $mid, after the last step $at_end; uninterrupted run ${D}s): $([ $bad -eq 0 ] && echo "every run ended equal to the uninterrupted one (final losses, ${RES#ok } metrics.jsonl records, weights bytes)" || echo "$bad MISMATCHES")")
done
echo "kill_resume.sh $N (seed $SEED):"
printf '  %s\n' "${SUMMARY[@]}"
[ $FAILED -eq 0 ] && echo PASS || { echo FAIL; exit 1; }

#!/usr/bin/env python3
"""ZeRO data parallelism: 1 process vs N ranks (mpirun), per stage.

For each ZeRO stage, trains the same global batch (N x micro_batch x accumulation) once on one
process (accumulation N*a) and once on N ranks (accumulation a), and prints tokens/s of both, their
ratio, the bytes a rank sent per step (counted by the communicator as a ring moves them, averaged
over the ranks), rank 0's bytes of parameters + gradients + optimizer state (one process's) and the
theoretical volume of the stage for Psi trainable floats on N ranks with accumulation a per rank (fp32):
  stage 0: all-reduce 2*Psi*(N-1)/N per step;  stage 1: all-reduce + all-gather 3*Psi*(N-1)/N;
  stage 2: a reduce-scatter per micro-batch (the gradients leave each unit as soon as its backward
           ends) + one all-gather: (a+1)*Psi*(N-1)/N;
  stage 3: per micro-batch each decoder layer gathered for the forward and again for the backward
           and its gradients reduce-scattered (3 x); the embedding and the head (final norm, lm_head)
           gathered and reduced once each (2 x), or, with a tied embedding, the embedding twice each
           (4 x) and the final norm gathered twice, reduced once (3 x): sum of count*size*(N-1)/N;
  with a tied embedding of E floats stage 2 also reduces it twice: (a+1)*Psi + a*E.  (x 4 bytes)
Also rank 0's predicted and measured (VmHWM) peak; with --offload the tokens/s of the same N-rank
run with offload_optimizer: disk against the resident one (the step-time cost of the offload); with
--overlap the same with zero_overlap: true (what overlapping the collectives gains or costs).
Usage: bench/bench_dist.py [--bin build/bin/leantune] [--ranks 2] [--method full] [--steps 20]
         [--model M --tokenizer T] [--stages 0,1,2,3] [--offload] [--overlap]
"""
import argparse
import json
import os
import shutil
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), "shared")


def run(cmd, env):
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode:
        raise SystemExit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-3000:]}")


def last_metrics(out):
    rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl")) if '"loss"' in l]
    return rows[-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin", "leantune"))
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--method", default="full")
    ap.add_argument("--model", default=os.path.join(SHARED, "models/stories260K/stories260K.bin"))
    ap.add_argument("--tokenizer", default=os.path.join(SHARED, "models/stories260K/tok512.bin"),
                    help="any tokenizer whose ids fit the model's vocabulary")
    ap.add_argument("--stages", default="0,1,2,3")
    ap.add_argument("--offload", action="store_true", help="also time each stage with offload_optimizer: disk")
    ap.add_argument("--overlap", action="store_true",
                    help="also time each stage with zero_overlap: true (nonblocking collectives, prefetch)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--accum", type=int, default=1, help="accumulation per rank")
    ap.add_argument("--threads", type=int, default=1, help="OpenMP threads per process")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="lt_bench_dist_")
    cfg = os.path.join(tmp, "cfg.yaml")
    with open(cfg, "w") as f:
        f.write(f"""base_model: {a.model}
tokenizer: {a.tokenizer}
datasets: [{{path: {SHARED}/data/aesop_fables/aesop_fables.txt}}]
method: {a.method}
lora_target_modules: [all-linear]
micro_batch_size: {a.micro_batch}
sequence_len: {a.seq}
max_steps: {a.steps}
lr_scheduler: constant
threads: {a.threads}
eval_batches: 1
""")
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    R = a.ranks
    print(f"bench_dist: {os.path.basename(a.model)} {a.method}, micro-batch {a.micro_batch} x {a.seq} tokens, global batch "
          f"{R} x {a.micro_batch} x {a.accum}, {a.steps} steps, {a.threads} thread(s) per process, "
          f"{os.cpu_count()} cores, binary {a.bin}")
    print(f"{'stage':>5} {'1 proc tok/s':>13} {f'{R} ranks tok/s':>14} {'ratio':>6} {'bytes/step/rank':>16} "
          f"{'theory':>12} {'sent/theory':>11} {'rank0 state MiB (1 proc)':>25} {'rank0 peak MiB pred/meas':>25}"
          + (f" {'offload tok/s':>13} {'vs resident':>11}" if a.offload else "")
          + (f" {'overlap tok/s':>14} {'overlap/blocking':>16}" if a.overlap else ""))
    for stage in [int(x) for x in a.stages.split(",")]:
        one = os.path.join(tmp, f"one{stage}")
        many = os.path.join(tmp, f"many{stage}")
        run([a.bin, "train", cfg, "--zero", str(stage), "--gradient_accumulation_steps", str(R * a.accum),
             "--output_dir", one], env)
        run([a.mpirun, "-np", str(R), "--oversubscribe", a.bin, "train", cfg, "--zero", str(stage),
             "--gradient_accumulation_steps", str(a.accum), "--output_dir", many], env)
        m1, mR = last_metrics(one), last_metrics(many)
        led = json.load(open(os.path.join(many, "ledger-rank0.json")))
        led1 = json.load(open(os.path.join(one, "ledger-rank0.json")))
        psi = led["trainable_floats"]

        def state_mib(j):
            cats = j["categories"]
            return sum(cats.get(k, {}).get("allocated", 0)
                       for k in ("trainable_params", "gradients", "optimizer_state")) / 2**20
        units, tied = led["unit_sizes"], led["tied_embedding_floats"] > 0
        # gathers + reductions per micro-batch: layers 2 + 1; untied, the embedding and the head 1 + 1;
        # tied, the embedding 2 + 2 (embedding, lm_head) and the head (final norm) 2 + 1
        count = [3] * len(units)
        count[0], count[-1] = (4, 3) if tied else (2, 2)
        stage3 = sum(n * size for n, size in zip(count, units))
        floats = {0: 2 * psi, 1: 3 * psi, 2: (a.accum + 1) * psi + a.accum * led["tied_embedding_floats"],
                  3: a.accum * stage3}[stage]
        theory = floats * (R - 1) / R * 4
        # bytes sent per step, averaged over the ranks (an owner receives its own pieces for free)
        sent = sum(json.load(open(os.path.join(many, f"ledger-rank{r}.json")))["comm_bytes_per_step"]
                   for r in range(R)) / R
        peak = f"{led['predicted_peak_bytes'] / 2**20:.0f} / {led['measured_peak_bytes'] / 2**20:.0f}"
        line = (f"{stage:>5} {m1['tokens_per_s']:>13.0f} {mR['tokens_per_s']:>14.0f} "
                f"{mR['tokens_per_s'] / m1['tokens_per_s']:>6.2f} {sent:>16.0f} {theory:>12.0f} {sent / theory:>11.4f} "
                f"{state_mib(led):>15.2f} ({state_mib(led1):.2f}) {peak:>25}")
        if a.offload:
            off = os.path.join(tmp, f"off{stage}")
            run([a.mpirun, "-np", str(R), "--oversubscribe", a.bin, "train", cfg, "--zero", str(stage),
                 "--gradient_accumulation_steps", str(a.accum), "--output_dir", off, "--offload_optimizer", "disk",
                 "--offload_dir", os.path.join(tmp, f"offfiles{stage}")], env)
            mo = last_metrics(off)
            line += f" {mo['tokens_per_s']:>13.0f} {mo['tokens_per_s'] / mR['tokens_per_s']:>11.2f}"
        if a.overlap:
            ovl = os.path.join(tmp, f"ovl{stage}")
            run([a.mpirun, "-np", str(R), "--oversubscribe", a.bin, "train", cfg, "--zero", str(stage),
                 "--gradient_accumulation_steps", str(a.accum), "--output_dir", ovl, "--zero_overlap", "true"], env)
            mo2 = last_metrics(ovl)
            lo = json.load(open(os.path.join(ovl, "ledger-rank0.json")))
            line += (f" {mo2['tokens_per_s']:>14.0f} {mo2['tokens_per_s'] / mR['tokens_per_s']:>16.2f}"
                     f"  (peak {lo['measured_peak_bytes'] / 2**20:.0f} MiB)")
        print(line, flush=True)
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# Every GPU figure of docs/benchmarks.md ("GPU") in one call, as one markdown file:
#
#     bash bench/gpu_all.sh [OUT.md]          # default: $OUT/gpu_figures.md, else ./gpu_figures.md
#     STEPS="tests perceptron" bash bench/gpu_all.sh   # a subset
#     BUDGET=300 bash bench/gpu_all.sh        # seconds for all steps together (default 470: the call
#                                             # ends within 8 minutes; a step with under 20 s left is "not run")
#
# Measured on one H200 on 2026-11-27 (docs/benchmarks.md): every step below but losses took 421 s,
# losses about 15 s per measurement (each runs in its own process) on top. Steps, in this order
# (each under its own time limit, cut to what is left of BUDGET, so one slow step cannot eat the
# others' time and the script ends inside BUDGET; a step that fails or times out is recorded as
# such, and one with under 20 s left is recorded as not run):
#   build       python -m kernels.build (the C++ kernels, for the CPU rows)
#   tests       the GPU-only tests (Triton kernels vs tensor path on CUDA, gpu_fast training, syncs)
#   perceptron  python -m bench.perceptron --device cuda: R=20 x N=100 x T=50,000 at d=6 and d=300
#   training    python -m bench.train_throughput --device cuda --skip-cpu: one MSLR-WEB30K-sized epoch, every row
#               against the GPU's compute floor (DataLoader, resident, gpu_fast's step graphs at 64/128/256 queries)
#   quality     python -m bench.train_throughput --quality --device cuda: validation ndcg@10 after 4 epochs,
#               the standard path vs gpu_fast, on three kinds of data, 3 seeds
#   trees       python -m bench.tree_scoring --train synthetic:2000 --device cuda: LambdaMART's exported
#               ensemble on the GPU vs LightGBM's predict
#   gp          python -m bench.gp --device cuda, then the same on one CPU thread of that machine
#   ensemble    python -m bench.ensemble_scorer --device cuda: stacked ensemble members vs a loop over K networks
#   harrington  python train.py experiment=harrington2003 harrington.device=cuda (the whole Table 1)
#   committee   python -m bench.committee_perceptron --device cuda
#   rankboost   python -m bench.rankboost --device cuda on 40,000 synthetic documents
#   table1      the perceptron stream at R=60 (Table 1's three tau in one tensor) with the Triton launch sweep
#   linklearn   python -m bench.linklearn --device cuda
#   losses      python -m bench.losses --device cuda: LambdaRank's Triton kernel vs the tensor path and the reference
#
# The full logs go to $TMPDIR/gpu_logs and, after every step, into gpu_logs.tar.gz beside the
# report, so a call cut short still returns what finished. On the lent GPU machines hydra-core,
# omegaconf and antlr4-python3-runtime (and liac-arff) are missing: carry them as wheels (the device
# tool's README) and put them on PYTHONPATH before this script; there .git may not travel, so pass
# COMMIT=<hash> for the report's header.
set -uo pipefail
cd "$(dirname "$0")/.."

START=$SECONDS
DEADLINE=$((START + ${BUDGET:-470}))
OUTFILE="${1:-${OUT:-.}/gpu_figures.md}"
OUTDIR="$(dirname "$OUTFILE")"
STEPS="${STEPS:-build tests training quality trees harrington rankboost committee perceptron gp ensemble table1 linklearn losses}"
LOGDIR="${TMPDIR:-/tmp}/gpu_logs"
rm -rf "$LOGDIR"
mkdir -p "$LOGDIR" "$OUTDIR"
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
# the interpreter that holds torch: on the lent GPU machines a plain `python` is not the venv's (2026-11-27:
# every step failed with "No module named torch"); PYTHON=... overrides
PY="${PYTHON:-python3}"
COMMIT="${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo '?')}"

{
  echo "# GPU figures"
  echo
  echo "Produced by \`bash bench/gpu_all.sh\` on $(date -u '+%Y-%m-%d %H:%M UTC'), commit $COMMIT."
  echo
  echo '```'
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit --format=csv 2>&1 | head -3
  "$PY" -c "import sys, torch, triton; print('python', sys.version.split()[0], '| torch', torch.__version__, '| cuda', torch.version.cuda, '| triton', triton.__version__, '|', torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA device')" 2>&1
  echo "CPU cores: $(nproc); $(uname -r)"
  echo '```'
} > "$OUTFILE"

save_logs() { tar czf "$OUTDIR/gpu_logs.tar.gz" -C "$(dirname "$LOGDIR")" "$(basename "$LOGDIR")" 2>/dev/null; }

# step NAME LIMIT FILTER COMMAND...: run it under min(LIMIT, time left), keep its full log, put the
# filtered output (and the log's tail if it failed) in the report
step() {
  local name="$1" limit="$2" filter="$3"
  shift 3
  case " $STEPS " in *" $name "*) ;; *) return ;; esac
  local left=$((DEADLINE - SECONDS - 5))
  if [ "$left" -lt 20 ]; then
    printf '\n## %s\n\nnot run: %s s left of BUDGET\n' "$name" "$left" >> "$OUTFILE"
    return
  fi
  [ "$left" -lt "$limit" ] && limit=$left
  local log="$LOGDIR/$name.log" start=$SECONDS
  echo ">>> $name (limit ${limit} s, at $((SECONDS - START)) s): $*" >&2
  timeout -k 5 "$limit" "$@" > "$log" 2>&1
  local rc=$?
  {
    echo
    echo "## $name"
    echo
    echo "\`$*\`: exit $rc$([ $rc -eq 124 ] && echo " (timed out after ${limit} s)") in $((SECONDS - start)) s"
    echo
    echo '```'
    grep -E "$filter" "$log" | cut -c1-400 || true
    [ $rc -ne 0 ] && { echo "--- last lines:"; tail -n 15 "$log" | cut -c1-400; }
    echo '```'
  } >> "$OUTFILE"
  echo "<<< $name: exit $rc in $((SECONDS - start)) s" >&2
  save_logs
}

TABLE='^(\||#|Test rank loss|Streams:|Triton launch sweep|machine)'
# only the files that hold GPU tests (those that use the cuda_only marker): collecting the whole suite
# costs time and imports optional packages
GPU_TESTS="$(grep -rl cuda_only tests --include='test_*.py' | sort | tr '\n' ' ')"
step build 40 '.' "$PY" -m kernels.build
step tests 110 '(passed|failed|error|skipped|FAILED|ERROR|Error|^E )' "$PY" -m pytest -q -m gpu -p no:cacheprovider -rA $GPU_TESTS
step training 90 "$TABLE|step graphs" "$PY" -m bench.train_throughput --device cuda --skip-cpu
step quality 170 "$TABLE" "$PY" -m bench.train_throughput --quality --device cuda --seeds 3
step trees 50 "$TABLE|difference" "$PY" -m bench.tree_scoring --train synthetic:2000 --rounds 100 --device cuda
step harrington 60 '.' "$PY" train.py experiment=harrington2003 harrington.device=cuda "hydra.run.dir=$LOGDIR/harrington"
step committee 40 "$TABLE" "$PY" -m bench.committee_perceptron --device cuda
step rankboost 40 "$TABLE" "$PY" -m bench.rankboost --train synthetic:100,400,136 --rounds 100 --reference-rounds 10 --device cuda
step perceptron 80 "$TABLE" "$PY" -m bench.perceptron --device cuda --dims 6 300
step gp 40 '.' bash -c "$PY -m bench.gp --device cuda && $PY -m bench.gp --device cpu --threads 1"
step ensemble 40 "$TABLE" "$PY" -m bench.ensemble_scorer --device cuda
step table1 50 "$TABLE" "$PY" -m bench.perceptron --device cuda --runs 60 --dims 6 --sweep --reference-steps 2000
step linklearn 40 "$TABLE" "$PY" -m bench.linklearn --device cuda
step losses 240 "$TABLE" "$PY" -m bench.losses --device cuda --shapes 16x512 4x4096 64x128 --losses "lambdarank (all pairs)" lambdarank@10

echo >> "$OUTFILE"
echo "Total $((SECONDS - START)) s. Full logs: $LOGDIR (and gpu_logs.tar.gz beside this file)" >> "$OUTFILE"
save_logs
cat "$OUTFILE"

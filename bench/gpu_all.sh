#!/usr/bin/env bash
# Every GPU figure of issue 14 in one call (about 10 minutes on one H100), as one markdown file:
#
#     bash bench/gpu_all.sh [OUT.md]          # default: $OUT/gpu_figures.md, else ./gpu_figures.md
#     STEPS="tests perceptron" bash bench/gpu_all.sh   # a subset
#
# Steps (each under its own time limit, so one slow step cannot eat the others' time; a step that
# fails or times out is recorded as such and the rest still run):
#   build       python -m kernels.build (the C++ kernel, for the CPU rows)
#   tests       the GPU-only tests (Triton kernel vs tensor path on CUDA, gpu_fast training, syncs)
#   perceptron  bench/perceptron.py --device cuda: R=20 x N=100 x T=50,000 at d=6 and d=300
#   table1      the same at R=60 (Table 1's three tau in one tensor) with the Triton launch sweep
#   harrington  python train.py experiment=harrington2003 harrington.device=cuda (the whole Table 1)
#   training    bench/train_throughput.py --device cuda: one MSLR-WEB30K-sized epoch
#   losses      bench/losses.py --device cuda: LambdaRank's Triton kernel vs the tensor path and the reference
#   ensemble    bench/ensemble_scorer.py --device cuda: stacked ensemble members vs a loop over K networks
#   gp          bench/gp.py --device cuda: one active-learning step of T GP tasks batched vs a one-task loop
#
# On the lent GPU machines hydra-core, omegaconf and antlr4-python3-runtime are missing: carry them as
# wheels (the device tool's README) and put them on PYTHONPATH before this script. Keep the whole call
# well inside its limit (STEPS= a subset): a call that outruns it returns no file at all.
set -uo pipefail
cd "$(dirname "$0")/.."

OUTFILE="${1:-${OUT:-.}/gpu_figures.md}"
STEPS="${STEPS:-build tests perceptron table1 harrington training losses ensemble gp}"
LOGDIR="$(dirname "$OUTFILE")/gpu_logs"
mkdir -p "$LOGDIR"
export PYTHONUNBUFFERED=1
# the interpreter that holds torch: on the lent GPU machines a plain `python` is not the venv's (2026-11-27:
# every step failed with "No module named torch"); PYTHON=... overrides
PY="${PYTHON:-python3}"

{
  echo "# GPU figures (issue 14)"
  echo
  echo "Produced by \`bash bench/gpu_all.sh\` on $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')."
  echo
  echo '```'
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "nvidia-smi unavailable"
  "$PY" -c "import torch, triton; print('torch', torch.__version__, '| triton', triton.__version__, '| cuda', torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else '')" 2>&1
  echo "CPU cores: $(nproc)"
  echo '```'
} > "$OUTFILE"

# step NAME LIMIT_SECONDS FILTER COMMAND...: run it, keep its full log, put the filtered output in the report
step() {
  local name="$1" limit="$2" filter="$3"
  shift 3
  case " $STEPS " in *" $name "*) ;; *) return ;; esac
  local log="$LOGDIR/$name.log" start=$SECONDS
  echo ">>> $name: $*" >&2
  timeout "$limit" "$@" > "$log" 2>&1
  local rc=$?
  {
    echo
    echo "## $name"
    echo
    echo "\`$*\`: exit $rc$([ $rc -eq 124 ] && echo " (timed out after ${limit} s)") in $((SECONDS - start)) s"
    echo
    grep -E "$filter" "$log" || true
  } >> "$OUTFILE"
}

TABLE='^(\||#|Test rank loss|Streams:|Triton launch sweep)'
step build 300 'kernel' "$PY" -m kernels.build
step tests 240 '(passed|failed|error|skipped)' "$PY" -m pytest -q -m gpu -p no:cacheprovider tests/
step perceptron 150 "$TABLE" "$PY" bench/perceptron.py --device cuda --dims 6 300
step table1 120 "$TABLE" "$PY" bench/perceptron.py --device cuda --runs 60 --dims 6 --sweep --reference-steps 2000
step harrington 150 "$TABLE" "$PY" train.py experiment=harrington2003 harrington.device=cuda "hydra.run.dir=$LOGDIR/harrington"
step training 330 "$TABLE" "$PY" bench/train_throughput.py --device cuda
step losses 150 "$TABLE" "$PY" bench/losses.py --device cuda --shapes 64x128 16x512 4x4096 --losses ranknet "lambdarank (all pairs)" lambdarank@10 "lambdaloss ndcg_loss2pp"
step ensemble 90 "$TABLE" "$PY" bench/ensemble_scorer.py --device cuda
step gp 90 "$TABLE" "$PY" bench/gp.py --device cuda

echo >> "$OUTFILE"
echo "Full logs: $LOGDIR" >> "$OUTFILE"
cat "$OUTFILE"

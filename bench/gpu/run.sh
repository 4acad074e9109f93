#!/usr/bin/env bash
# Issue 9's GPU benchmark, everything in one call on the GPU machine; builds nothing.
#
#   bench/gpu/run.sh --build DIR [--stages LIST] [--model DIR] [--out DIR] [--quick]
#                    [--goldens DIR] [--bench-args "..."]
#
#   --stages LIST    comma-separated subset of ceilings,ours,reference,summary (default: all).
#                    One device call may run 10 minutes at most: run "ceilings,ours" in one
#                    call and "reference" in the next (the checkpoint is regenerated when a
#                    fresh machine lacks it), then summary (here or there).
#   --build DIR      folder holding bin/{gpu_ceilings,make_bench_model,gpu_model_bench}
#                    (+ gpu-libs.tar.xz from tools/gpu/bundle-libs.sh)
#   --model DIR      where the random-weight flash4 checkpoint goes (default /tmp/flash4;
#                    generated if absent, ~32 GB, never shipped)
#   --out DIR        results (default $OUT, else ./bench-out): ceilings.json, model.json,
#                    reference.json, summary.md and run.log
#   --quick          a small grid (batches 1,32; context 4096; prefill 4096)
#   --grid "ARGS"    gpu_model_bench grid arguments instead of the default grid
#   --ref-args "ARGS" hf_reference.py --bench arguments instead of the default ones
#   OURS_TIMEOUT / REF_TIMEOUT (env, seconds): stage time limits (default 420 / 360)
#   --goldens DIR    tiny_a golden case for the reference's self-check (default
#                    gpu-carry/goldens/tiny_a)
#
# Steps: ceilings (HBM copy/read, cuBLASLt BF16/FP8 GEMM) -> checkpoint -> our decode grid,
# prefill and per-op breakdown -> the reference on the same checkpoint -> projection and
# summary (bench/gpu/project.py). The last lines printed are the summary table.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=""
MODEL=/tmp/flash4
RESULTS=${OUT:-$PWD/bench-out}
QUICK=0
STAGES="ceilings,ours,reference,summary"
GOLDENS="$ROOT/gpu-carry/goldens/tiny_a"
BENCH_ARGS=""
GRID_OVERRIDE=""
REF_ARGS=""
OURS_TIMEOUT=${OURS_TIMEOUT:-420}  # seconds per stage (a device call runs 600 s at most)
REF_TIMEOUT=${REF_TIMEOUT:-360}
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$(cd "$2" && pwd); shift 2 ;;
    --model) MODEL="$2"; shift 2 ;;
    --out) RESULTS="$2"; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --stages) STAGES="$2"; shift 2 ;;
    --goldens) GOLDENS="$2"; shift 2 ;;
    --bench-args) BENCH_ARGS="$2"; shift 2 ;;
    --grid) GRID_OVERRIDE="$2"; shift 2 ;;
    --ref-args) REF_ARGS="$2"; shift 2 ;;
    -h|--help) sed -n 2,20p "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
[ -n "$BUILD" ] || { echo "--build DIR is required" >&2; exit 2; }
mkdir -p "$RESULTS"
LOG="$RESULTS/run.log"  # every step's output (the device tool returns at most 8 files)
BIN="$BUILD/bin"
# shellcheck source=SCRIPTDIR/bench_env.sh
. "$(dirname "${BASH_SOURCE[0]}")/bench_env.sh"
bench_unpack_bins "$BUILD"
bench_library_path "$BUILD"
PYLIB=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null || true)
[ -n "$PYLIB" ] && [ -d "$PYLIB" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$PYLIB"
export PYTHONUNBUFFERED=1

step() { echo; echo "== $* ($(date +%T))"; }
want() { case ",$STAGES," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

step "machine"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,driver_version --format=csv | tee -a "$LOG"
nproc; free -g | head -2; df -h /tmp | tail -1

if want ceilings; then
  step "ceilings"
  "$BIN/gpu_ceilings" --json "$RESULTS/ceilings.json" 2>&1 | tee -a "$LOG"
fi

if (want ours || want reference) && ! bench_model_complete "$MODEL"; then
  step "checkpoint"
  time bench_ensure_model "$BIN" "$MODEL" 2>&1 | tee -a "$LOG"
  du -sh "$MODEL"
fi

if [ "$QUICK" = 1 ]; then
  GRID="--batches 1,32 --contexts 4096 --prefill 4096 --breakdown 1:4096,32:4096 --steps 3"
else
  GRID="--batches 1,8,32,128,256 --contexts 4096,32768 --prefill 4096,16384 --breakdown 1:4096,32:4096,256:4096 --steps 5"
fi
[ -n "$GRID_OVERRIDE" ] && GRID="$GRID_OVERRIDE"
if want ours; then
  step "our engine: decode grid, prefill, per-op breakdown"
  # shellcheck disable=SC2086
  timeout "$OURS_TIMEOUT" "$BIN/gpu_model_bench" --model "$MODEL" --ceilings "$RESULTS/ceilings.json" $GRID $BENCH_ARGS \
      --json "$RESULTS/model.json" 2>&1 | tee -a "$LOG"
fi

REF_JSON=""
if want reference; then
  if [ -d "$ROOT/.ref" ]; then
    step "reference: golden self-check (tiny_a, fp32)"
    python3 "$ROOT/bench/gpu/hf_reference.py" --check-goldens "$GOLDENS" 2>&1 | tee -a "$LOG"
    step "reference: decode on the same checkpoint (bf16)"
    if [ "$QUICK" = 1 ]; then RB=1; RC=4096; else RB=1,8,32; RC=4096,32768; fi
    [ -n "$REF_ARGS" ] || REF_ARGS="--batches $RB --contexts $RC --steps 8 --fill auto --time-limit 60 --total-limit $((REF_TIMEOUT - 30))"
    # shellcheck disable=SC2086
    timeout "$REF_TIMEOUT" python3 "$ROOT/bench/gpu/hf_reference.py" --bench "$MODEL" --dtype bfloat16 \
        $REF_ARGS --json "$RESULTS/reference.json" 2>&1 | tee -a "$LOG"
  else
    echo "no .ref/ (upstream reference code): reference skipped (bench/gpu/REFERENCE.md)"
  fi
fi

[ -f "$RESULTS/reference.json" ] && REF_JSON="--reference $RESULTS/reference.json"
if want summary && [ -f "$RESULTS/model.json" ]; then
  step "summary"
  # shellcheck disable=SC2086
  python3 "$ROOT/bench/gpu/project.py" --model-json "$RESULTS/model.json" \
      --ceilings "$RESULTS/ceilings.json" $REF_JSON | tee "$RESULTS/summary.md"
fi

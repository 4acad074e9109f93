#!/usr/bin/env bash
# What each group of kernels costs in the decode step (issue 9, session 15's accounting): runs
# gpu_model_bench with DEEPINFER_CUDA_SKIP_KERNELS set to each group's kernel-name substrings
# (src/backend/cuda/kernel_census.h: the recorded launches are dropped, so the step runs
# without them and computes wrong values), interleaved with unmodified runs, and tabulates the
# median step per batch and its difference from the median of the unmodified runs.
#
#   bench/gpu/ablate.sh --build DIR --model DIR [--out DIR] [--batches 1,8,32] [--repeats 2]
#                       [--groups "name=pat1,pat2;name2=..."] [--env "VAR=value ..."]
#
#   --build DIR    folder holding bin/gpu_model_bench (bins.tar.xz is unpacked if needed)
#   --model DIR    a flash4 checkpoint (make_bench_model --layers-preset flash4 --scale real;
#                  generated there with bin/make_bench_model unless complete: bench_env.sh)
#   --out DIR      results (default $OUT, else ./ablate-out): ab-<group>-<rep>.txt ('+' in a
#                  group name written as '_'), ablation.md
#   --batches      decode batch sizes (context 4096)
#   --repeats      rounds of (base, every group) (default 2)
#   --groups       replaces the default groups below
#   --env          extra environment for every run (default DEEPINFER_CUDA_FP8_ACT=1)
#
# Reading the table: at B > 1 a group that feeds the hidden state (everything but the expert
# GEMMs and the attention, roughly) changes the routing, so its B > 1 columns are not costs.
# A group whose skipped kernels leave rows the attention rejects (RmsNorm, RoPE, quantisation
# alone) stops the run: skip SparseAttention with it (the default "small" groups do).
set -uo pipefail
BUILD=""
MODEL=""
RESULTS=${OUT:-$PWD/ablate-out}
BATCHES=1,8,32
REPEATS=2
EXTRA_ENV="DEEPINFER_CUDA_FP8_ACT=1"
SMALL="HcMix,HcCollapse,HcExpand,RmsNorm,QuantizeStream,Rope,SwiGlu,CombineSlots,AddKernel"
SMALL="$SMALL,ScaleKernel,CopyManyKernel,GemvKernel,QuantizeRowsBf16,GatherSelected,GatherToken"
SMALL="$SMALL,GatedPool,EngramGate,SplitBf16,Argmax"
INDEXER="IndexerScores,IndexerMma,TopKKernel,CandidateBlock,MarkKept,ApplyMask"
ROUTING="RouteKernel,RouteWarp,RouteSplit,CountPairs,FillGroups"
GROUP_SPEC="streams=LinearStreamKernel;experts=ExpertStreamGemm;attention=SparseAttention"
GROUP_SPEC="$GROUP_SPEC;hcmix=HcMix;gemv=GemvKernel;collapse=HcCollapse"
GROUP_SPEC="$GROUP_SPEC;attention+small=SparseAttention,$SMALL"
GROUP_SPEC="$GROUP_SPEC;attention+small+indexer=SparseAttention,$SMALL,$INDEXER"
GROUP_SPEC="$GROUP_SPEC;attention+small+indexer+routing=SparseAttention,$SMALL,$INDEXER,$ROUTING"
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$(cd "$2" && pwd); shift 2 ;;
    --model) MODEL="$2"; shift 2 ;;
    --out) RESULTS="$2"; shift 2 ;;
    --batches) BATCHES="$2"; shift 2 ;;
    --repeats) REPEATS="$2"; shift 2 ;;
    --groups) GROUP_SPEC="$2"; shift 2 ;;
    --env) EXTRA_ENV="$2"; shift 2 ;;
    -h|--help) sed -n 2,25p "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
[ -n "$BUILD" ] && [ -n "$MODEL" ] || { echo "--build DIR and --model DIR are required" >&2; exit 2; }
BIN="$BUILD/bin"
# shellcheck source=SCRIPTDIR/bench_env.sh
. "$(dirname "${BASH_SOURCE[0]}")/bench_env.sh"
bench_unpack_bins "$BUILD"
bench_library_path "$BUILD"
[ -x "$BIN/gpu_model_bench" ] || { echo "no $BIN/gpu_model_bench" >&2; exit 2; }
mkdir -p "$RESULTS"
bench_ensure_model "$BIN" "$MODEL" >/dev/null || { echo "make_bench_model failed" >&2; exit 1; }

# One run: $1 = file name, $2 = skip patterns (empty: none). Prints "B=1 1.43 B=8 2.72 ...".
run_one() {
  # shellcheck disable=SC2086  # EXTRA_ENV is a list of assignments
  env $EXTRA_ENV DEEPINFER_CUDA_SKIP_KERNELS="$2" timeout "${ABLATE_TIMEOUT:-90}" \
    "$BIN/gpu_model_bench" --model "$MODEL" --batches "$BATCHES" --contexts 4096 \
    --prefill 16 --steps 8 > "$RESULTS/$1" 2>&1
  grep -E '^decode' "$RESULTS/$1" | awk '{printf "%s %s ", $2, $5}'
}

IFS=';' read -r -a GROUP_LIST <<< "$GROUP_SPEC"
TIMES="$RESULTS/times.txt"  # lines: group batch ms
: > "$TIMES"
for rep in $(seq 1 "$REPEATS"); do
  for entry in "base=" "${GROUP_LIST[@]}"; do
    name=${entry%%=*}
    patterns=${entry#*=}
    file="ab-${name//+/_}-$rep.txt"  # no '+' in file names (the device tool returns none such)
    line=$(run_one "$file" "$patterns")
    echo "$name (round $rep): ${line:-failed, see $file}"
    set -- $line
    while [ $# -ge 2 ]; do echo "$name ${1#B=} $2" >> "$TIMES"; shift 2; done
  done
done

python3 - "$TIMES" "$BATCHES" "$GROUP_SPEC" > "$RESULTS/ablation.md" <<'PY'
import statistics, sys
times, batches, groups = sys.argv[1], sys.argv[2].split(","), sys.argv[3]
names = ["base"] + [g.split("=", 1)[0] for g in groups.split(";") if g]
ms = {}
for line in open(times):
    name, batch, value = line.split()
    ms.setdefault((name, batch), []).append(float(value))
def cell(name, b):
    got = ms.get((name, b))
    if not got:
        return "failed"
    med = statistics.median(got)
    base = ms.get(("base", b))
    if name == "base" or not base:
        return f"{med:.2f}"
    return f"{med:.2f} ({med - statistics.median(base):+.2f})"
print("| skipped | " + " | ".join(f"B={b} step ms (vs base)" for b in batches) + " |")
print("|---|" + "---|" * len(batches))
for n in names:
    print(f"| {n} | " + " | ".join(cell(n, b) for b in batches) + " |")
PY
cat "$RESULTS/ablation.md"

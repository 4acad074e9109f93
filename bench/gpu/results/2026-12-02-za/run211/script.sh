#!/usr/bin/env bash
# Session 25 run 211: the wgmma attention kernel with decode splits (clusters over each token's chunks):
# tests; decode A/B with the kernel taken from 1 token (DEEPINFER_ATTN_PREFILL_MIN_TOKENS) against the
# default (64); ncu durations of both attention kernels at B=1 / 8 / 32.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
( $B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real >/dev/null 2>&1; echo done > /tmp/model-ready ) &
timeout 150 $B/cuda_backend_test --gtest_filter='CudaAttentionPrefillTest.*:AttnPrefill*.*:CudaAttentionMmaTest.*:SparseAttentionInvarianceTest.*' > $R/tests.txt 2>&1; echo "attn tests rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure|Expected|Which is" $R/tests.txt | head -24
DEEPINFER_ATTN_PREFILL_MIN_TOKENS=1 DEEPINFER_CUDA_FP8_ACT=1 timeout 150 $B/cuda_backend_test --gtest_filter='*Model*:*Fp8*' > $R/tests-model.txt 2>&1; echo "model tests (prefill attn from 1 token) rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $R/tests-model.txt | head -24
while [ ! -f /tmp/model-ready ]; do sleep 1; done
export DEEPINFER_CUDA_FP8_ACT=1
ab() {  # ab NAME ENV... : one decode grid
  local n=$1; shift
  env "$@" timeout 60 $B/gpu_model_bench --model /dev/shm/flash4 --batches 1,2,4,8,16,32,64 --contexts 4096 --steps 6 > $R/ab-$n-$SECONDS.txt 2>&1
  echo "ab $n rc=$? ($SECONDS s) $(grep -E '^decode|rror' $(ls -t $R/ab-$n-*.txt | head -1) | cut -c1-45 | sed 's/C=4096   step//;s/decode //' | tr -s ' ' | paste -sd' ')"
}
for r in 1 2; do ab def X=0; ab pf1 DEEPINFER_ATTN_PREFILL_MIN_TOKENS=1; ab pf16 DEEPINFER_ATTN_PREFILL_MIN_TOKENS=16; done
ab pf1s4 DEEPINFER_ATTN_PREFILL_MIN_TOKENS=1 DEEPINFER_ATTN_SPLITS=4
M="gpu__time_duration.sum,dram__bytes_read.sum,lts__t_bytes.sum,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,launch__grid_size"
for b in 1 8 32; do for pf in 64 1; do
  DEEPINFER_ATTN_PREFILL_MIN_TOKENS=$pf DEEPINFER_CUDA_GRAPHS=0 timeout 90 ncu --clock-control none --kernel-name regex:"SparseAttention(Mma|Wgmma)Kernel" --launch-skip 8 --launch-count 4 --csv --print-units base --metrics $M $B/gpu_model_bench --model /dev/shm/flash4 --batches $b --contexts 4096 --steps 2 > $R/ncu-attn-b$b-pf$pf.csv 2> $R/ncu-attn-b$b-pf$pf.err; echo "ncu b=$b pf=$pf rc=$? ($SECONDS s)"
  python3 bench/gpu/ncu_summary.py $R/ncu-attn-b$b-pf$pf.csv --launches > $R/ncu-attn-b$b-pf$pf.txt 2>&1; head -7 $R/ncu-attn-b$b-pf$pf.txt | cut -c1-130
done; done
tar -cJf $OUT/o.tar.xz -C $OUT r

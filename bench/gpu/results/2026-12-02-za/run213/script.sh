#!/usr/bin/env bash
# Session 25 run 213: final code (the wgmma attention from 8 tokens by default): the attention suites;
# decode A/B default / from 1 token / former dispatch; the issue 9 grid with ceilings.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
( $B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real >/dev/null 2>&1; echo done > /tmp/model-ready ) &
timeout 100 $B/cuda_backend_test --gtest_filter='CudaAttentionPrefillTest.*:AttnPrefill*.*:CudaAttentionMmaTest.*' > $R/tests.txt 2>&1; echo "attn tests rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure" $R/tests.txt | head -12
while [ ! -f /tmp/model-ready ]; do sleep 1; done
export DEEPINFER_CUDA_FP8_ACT=1
ab() {  # ab NAME ENV... : one decode grid
  local n=$1; shift
  env "$@" timeout 60 $B/gpu_model_bench --model /dev/shm/flash4 --batches 1,2,4,8,16,32 --contexts 4096 --steps 6 --prefill 4096 > $R/ab-$n-$SECONDS.txt 2>&1
  echo "ab $n rc=$? ($SECONDS s) $(grep -E '^decode|rror' $(ls -t $R/ab-$n-*.txt | head -1) | cut -c1-45 | sed 's/C=4096   step//;s/decode //' | tr -s ' ' | paste -sd' ')"
}
for r in 1 2; do ab def X=0; ab from1 DEEPINFER_ATTN_WGMMA_MIN_TOKENS=1; ab former DEEPINFER_ATTN_WGMMA_MIN_TOKENS=0; done
$B/gpu_ceilings --json $R/ceilings.json > $R/ceilings.txt 2>&1; echo "ceilings rc=$? ($SECONDS s)"; grep -iE "hbm read|fp8 e4m3 GEMM 8192.3 .cuBLASLt, TN" $R/ceilings.txt | head -3
timeout 150 $B/gpu_model_bench --model /dev/shm/flash4 --ceilings $R/ceilings.json --batches 1,8,32,128,256 --contexts 4096 --breakdown 32:4096 --prefill 4096,16384 --steps 8 --json $R/model-fp8.json > $R/model-fp8.txt 2>&1; echo "grid rc=$? ($SECONDS s)"; grep -E "^decode|^prefill P|GEMM part" $R/model-fp8.txt | cut -c1-110
tar -cJf $OUT/o.tar.xz -C $OUT r

#!/usr/bin/env bash
# Session 25 run 212: the wgmma attention from 1 token by default (DEEPINFER_ATTN_WGMMA_MIN_TOKENS=1), splits
# sized to the clusters that fit at once: the whole cuda_backend_test; decode A/B against the old dispatch;
# the issue 9 grid (ceilings, decode 4k with breakdowns, prefill 4k / 16k, 32k); ncu stalls of the kernel at B=8.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
( $B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real >/dev/null 2>&1; echo done > /tmp/model-ready ) &
timeout 240 $B/cuda_backend_test > $R/tests.txt 2>&1; echo "cuda_backend_test rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure" $R/tests.txt | head -12
while [ ! -f /tmp/model-ready ]; do sleep 1; done
export DEEPINFER_CUDA_FP8_ACT=1
ab() {  # ab NAME ENV... : one decode grid
  local n=$1; shift
  env "$@" timeout 60 $B/gpu_model_bench --model /dev/shm/flash4 --batches 1,2,4,8,16,32,64 --contexts 4096 --steps 6 --prefill 4096 > $R/ab-$n-$SECONDS.txt 2>&1
  echo "ab $n rc=$? ($SECONDS s) $(grep -E '^decode|^prefill|rror' $(ls -t $R/ab-$n-*.txt | head -1) | cut -c1-45 | sed 's/C=4096   step//;s/decode //' | tr -s ' ' | paste -sd' ')"
}
for r in 1 2; do ab new X=0; ab old DEEPINFER_ATTN_WGMMA_MIN_TOKENS=0; done
$B/gpu_ceilings --json $R/ceilings.json > $R/ceilings.txt 2>&1; echo "ceilings rc=$? ($SECONDS s)"; grep -iE "hbm read|fp8 e4m3 GEMM 8192.3 .cuBLASLt, TN" $R/ceilings.txt | head -3
timeout 200 $B/gpu_model_bench --model /dev/shm/flash4 --ceilings $R/ceilings.json --batches 1,8,32,128,256 --contexts 4096 --breakdown 1:4096,8:4096,32:4096,128:4096 --prefill 4096,16384 --prefill-breakdown 4096,16384 --steps 8 --json $R/model-fp8.json > $R/model-fp8.txt 2>&1; echo "grid rc=$? ($SECONDS s)"; grep -E "^decode|^prefill P|GEMM part" $R/model-fp8.txt | cut -c1-110
timeout 60 $B/gpu_model_bench --model /dev/shm/flash4 --batches 1,8,32 --contexts 32768 --steps 8 > $R/grid32k.txt 2>&1; echo "grid32k rc=$? ($SECONDS s)"; grep -E "^decode" $R/grid32k.txt | cut -c1-60
DEEPINFER_CUDA_GRAPHS=0 timeout 100 ncu --clock-control none --kernel-name regex:SparseAttentionWgmmaKernel --launch-skip 9 --launch-count 1 --section WarpStateStats --section SourceCounters --page source --print-source sass --csv $B/gpu_model_bench --model /dev/shm/flash4 --batches 8 --contexts 4096 --steps 2 --prefill 4096 > $R/ncu-wg-src.csv 2> $R/ncu-wg-src.err; echo "ncu src rc=$? ($SECONDS s)"
python3 bench/gpu/ncu_stalls.py $R/ncu-wg-src.csv --phases > $R/ncu-wg-phases.txt 2>&1; python3 bench/gpu/ncu_stalls.py $R/ncu-wg-src.csv --top 40 > $R/ncu-wg-top.txt 2>&1; head -30 $R/ncu-wg-top.txt | cut -c1-120
tar -cJf $OUT/o.tar.xz -C $OUT r

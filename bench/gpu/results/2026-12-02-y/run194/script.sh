#!/usr/bin/env bash
# Session 23 run 194: e4m3 decode experts by default (direct prefill GEMM and pipelined variants removed): the expert /
# stream / graph tests, then the record grid (ceilings, breakdowns at B=1/8/32/128/256, prefill) and decode at 32k.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
export DEEPINFER_GOLDENS_DIR=$PWD/gpu-carry/goldens
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
( $B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real >/dev/null 2>&1; echo done > /tmp/model-ready ) &
timeout 150 $B/cuda_backend_test --gtest_filter='CudaMoeBlock128*:CudaMoeStreamTest.*:CudaRoutedExperts*:CudaMoeTest.*:CudaFp8ExpertsTest.*:CudaGraphTest.*:*Model*' > $R/tests.txt 2>&1; echo "tests rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure" $R/tests.txt | head -10
while [ ! -f /tmp/model-ready ]; do sleep 1; done
$B/gpu_ceilings --json $R/ceilings.json > $R/ceilings.txt 2>&1; echo "ceilings rc=$? ($SECONDS s)"; grep -iE "hbm read|fp8 e4m3 GEMM 8192.3 .cuBLASLt, TN" $R/ceilings.txt | head -3
DEEPINFER_CUDA_FP8_ACT=1 timeout 220 $B/gpu_model_bench --model /dev/shm/flash4 --ceilings $R/ceilings.json --batches 1,8,32,128,256 --contexts 4096 --breakdown 1:4096,8:4096,32:4096,128:4096,256:4096 --prefill 4096,16384 --steps 8 --json $R/model-fp8.json > $R/model-fp8.txt 2>&1; echo "grid rc=$? ($SECONDS s)"; grep -E "^decode|^prefill P" $R/model-fp8.txt | cut -c1-110
DEEPINFER_CUDA_FP8_ACT=1 timeout 60 $B/gpu_model_bench --model /dev/shm/flash4 --batches 1,8,32 --contexts 32768 --steps 8 > $R/grid32k.txt 2>&1; echo "grid32k rc=$? ($SECONDS s)"; grep -E "^decode" $R/grid32k.txt | cut -c1-90
DEEPINFER_EXPERTS_DECODE_E4M3=0 DEEPINFER_CUDA_FP8_ACT=1 timeout 40 $B/gpu_model_bench --model /dev/shm/flash4 --batches 1,8,32,128,256 --contexts 4096 --steps 8 > $R/grid-off.txt 2>&1; echo "grid e4m3=0 rc=$? ($SECONDS s)"; grep -E "^decode" $R/grid-off.txt | cut -c1-45 | tr -s ' ' | paste -sd' '
tar -cJf $OUT/o.tar.xz -C $OUT r

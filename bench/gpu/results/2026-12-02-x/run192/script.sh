#!/usr/bin/env bash
# Session 22 run 192: the experimental decode e4m3 streaming GEMM (k_moe_block128_stream.cu, DEEPINFER_EXPERTS_DECODE_E4M3=1):
# its test, then the decode step with the knob off / on.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
( $B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real >/dev/null 2>&1; echo done > /tmp/model-ready ) &
timeout 60 $B/cuda_backend_test --gtest_filter='CudaMoeBlock128Test.*Decode*:CudaMoeBlock128Test.MatchesBlock128Reference' > $R/tests.txt 2>&1; echo "tests rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure|Value of|Actual|Expected|rel" $R/tests.txt | head -24
while [ ! -f /tmp/model-ready ]; do sleep 1; done
for on in 0 1 0 1; do
  DEEPINFER_EXPERTS_DECODE_E4M3=$on DEEPINFER_CUDA_FP8_ACT=1 timeout 40 $B/gpu_model_bench --model /dev/shm/flash4 --batches 1,8,32,128,256 --contexts 4096 --steps 8 > $R/grid-$on-$SECONDS.txt 2>&1; echo "grid e4m3=$on rc=$? ($SECONDS s)"; grep -E "^decode|rror" $(ls -t $R/grid-$on-*.txt | head -1) | cut -c1-45 | tr -s ' ' | paste -sd' '
done

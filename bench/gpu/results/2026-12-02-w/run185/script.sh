#!/usr/bin/env bash
# Session 21 run 185: the review's mends (backend falls back when the row scales cannot be kept; ExpertRowOf;
# EachMatrixUsesItsOwnRowScales): block-128 tests and the 4k prefill on the final binary.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
( $B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real >/dev/null 2>&1; echo done > /tmp/model-ready ) &
timeout 60 $B/cuda_backend_test --gtest_filter='*MoeBlock128*' > $R/tests.txt 2>&1; echo "tests rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure|EachMatrix" $R/tests.txt | head -10
while [ ! -f /tmp/model-ready ]; do sleep 1; done
DEEPINFER_CUDA_FP8_ACT=1 timeout 40 $B/gpu_model_bench --model /dev/shm/flash4 --batches 1 --contexts 16 --prefill 4096 --steps 1 > $R/model.txt 2>&1; echo "model rc=$? ($SECONDS s)"; grep -E "^prefill P|^  RoutedExperts " $R/model.txt | head -3
tar -cJf $OUT/o.tar.xz -C $OUT r

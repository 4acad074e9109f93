#!/usr/bin/env bash
# Session 19 run 172: the review's mends (whole-layer copy budget check, format check, trap waits,
# the producer's cp.async drain, the RS kernel split, ring wrap-around test with wide scales).
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
timeout 80 $B/cuda_backend_test --gtest_filter='*MoeBlock128*:*Fp8Experts*:CudaRuntimeTest.*' > $R/tests.txt 2>&1; echo "tests rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure|Expected|Which is|actual" $R/tests.txt | head -30
tar -cJf $OUT/o.tar.xz -C $OUT r

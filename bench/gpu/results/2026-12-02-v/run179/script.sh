#!/usr/bin/env bash
# Session 20 run 179: EachPathRunsItsOwnGemm (which GEMM kernel each path runs, by kernel skip patterns);
# the kernel census tests with the shared ScopedKernelSkipPatterns; the block-128 tests.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
timeout 120 $B/cuda_backend_test --gtest_filter='*MoeBlock128*:*KernelCensus*' > $R/tests.txt 2>&1; echo "tests rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure|Expected|Which is|trace" $R/tests.txt | head -20
tar -cJf $OUT/o.tar.xz -C $OUT r

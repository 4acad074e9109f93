#!/usr/bin/env bash
# Session 25 run 215: the whole cuda_backend_test on the final code (the CPU paged-attention test fixed to a
# head_dim the fake-quant accepts).
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
timeout 280 $B/cuda_backend_test > $R/tests.txt 2>&1; echo "cuda_backend_test rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure|CHECK" $R/tests.txt | head -12
grep -E "^\[ *(OK|FAILED) " $R/tests.txt > $R/tests-summary.txt
tar -cJf $OUT/o.tar.xz -C $OUT r

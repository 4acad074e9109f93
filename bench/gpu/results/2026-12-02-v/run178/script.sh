#!/usr/bin/env bash
# Session 20 run 178: the NaN-row test synchronises before its copy (run 177's failure); block-128 tests.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
timeout 100 $B/cuda_backend_test --gtest_filter='*OutOfRangeIdGivesNaNRow*' --gtest_repeat=40 > $R/nanrow.txt 2>&1; echo "nan-row x40 rc=$? ($SECONDS s)"; grep -c "^\[       OK \]" $R/nanrow.txt; grep -E "FAILED  \]|Failure" $R/nanrow.txt | head -5
timeout 150 $B/cuda_backend_test --gtest_filter='*MoeBlock128*' > $R/tests.txt 2>&1; echo "block128 rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure" $R/tests.txt | head -10
tar -cJf $OUT/o.tar.xz -C $OUT r

#!/usr/bin/env bash
# Session 26 run 219: the final code (a96c76a's kernels; the paired-row stream and the hi-only indexer staging
# taken out again): the whole cuda_backend_test and cuda_goldens_test, no FP8 environment.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
export DEEPINFER_REQUIRE_GPU=1 DEEPINFER_GOLDENS_DIR=$PWD/gpu-carry/goldens
timeout 400 $B/cuda_backend_test > $R/tests.txt 2>&1; echo "cuda_backend_test rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure|tests ran" $R/tests.txt | head -12
timeout 150 $B/cuda_goldens_test > $R/tests-goldens.txt 2>&1; echo "cuda_goldens_test rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure|tests ran" $R/tests-goldens.txt | head -12
xz -9 $R/tests.txt
tar -cJf $OUT/o.tar.xz -C $OUT r

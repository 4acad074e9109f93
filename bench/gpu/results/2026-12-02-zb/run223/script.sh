#!/usr/bin/env bash
# Session 26 run 223: the indexer's L2 hint removed: the indexer, model and graph suites.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64 DEEPINFER_REQUIRE_GPU=1
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
timeout 150 $B/cuda_backend_test --gtest_filter='*Indexer*:*Model*:*Graph*' > $R/tests.txt 2>&1; echo "cuda_backend_test subset rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure" $R/tests.txt | head -12

#!/usr/bin/env bash
# Session 19 run 167: verification of the final code: every backend test (also session 18's
# unverified mends), the goldens and model tests, the FP8 engine tests (copies budget on).
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
export DEEPINFER_GOLDENS_DIR=$PWD/gpu-carry/goldens
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
timeout 330 $B/cuda_backend_test > $R/backend.txt 2>&1; echo "backend rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests ran" $R/backend.txt | head -20
timeout 120 $B/cuda_goldens_test > $R/goldens.txt 2>&1; echo "goldens rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $R/goldens.txt | head -8
DEEPINFER_EXPERTS_FP8_COPY_GIB=8 DEEPINFER_TEST_BACKEND=cuda DEEPINFER_CUDA_FP8_ACT=1 timeout 100 $B/engine_model_test --gtest_filter='*/0:-*Cli*:*EqualsGoldens*:*ParallelSamplesShareThePrompt*' > $R/engine-fp8.txt 2>&1; echo "engine fp8 rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $R/engine-fp8.txt | head -5
tar -cJf $OUT/o.tar.xz -C $OUT r

#!/usr/bin/env bash
# Session 19 run 171: verification with the register path on by default: every backend test, the
# goldens and model tests, the FP8 engine tests; the prefill with the default (registers) / off.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
export DEEPINFER_GOLDENS_DIR=$PWD/gpu-carry/goldens
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
( $B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real >/dev/null 2>&1; echo done > /tmp/model-ready ) &
timeout 300 $B/cuda_backend_test > $R/backend.txt 2>&1; echo "backend rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $R/backend.txt | head -20
timeout 100 $B/cuda_goldens_test > $R/goldens.txt 2>&1; echo "goldens rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $R/goldens.txt | head -8
DEEPINFER_TEST_BACKEND=cuda DEEPINFER_CUDA_FP8_ACT=1 timeout 100 $B/engine_model_test --gtest_filter='*/0:-*Cli*:*EqualsGoldens*:*ParallelSamplesShareThePrompt*' > $R/engine-fp8.txt 2>&1; echo "engine fp8 rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $R/engine-fp8.txt | head -5
while [ ! -f /tmp/model-ready ]; do sleep 1; done
for b in 1 0; do DEEPINFER_EXPERTS_BLOCK128=$b DEEPINFER_CUDA_FP8_ACT=1 timeout 60 $B/gpu_model_bench --model /dev/shm/flash4 --batches 1 --contexts 16 --prefill 4096 --served-prefill 4096,16384 --step-budgets 8192 --steps 2 > $R/served-b$b.txt 2>&1; echo "served block128=$b rc=$? ($SECONDS s)"; grep -E "^served|^prefill P|^  RoutedExperts " $R/served-b$b.txt | head -6; done
tar -cJf $OUT/o.tar.xz -C $OUT r

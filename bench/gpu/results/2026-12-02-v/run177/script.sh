#!/usr/bin/env bash
# Session 20 run 177: the final code (sign-mode PRMT, the item width picked once): the full backend suite,
# goldens, FP8 engine tests; ceilings; the default path's prefill grid with the GEMM-part figure,
# decode 4k B=1/8/32; prefill as served.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
export DEEPINFER_GOLDENS_DIR=$PWD/gpu-carry/goldens
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
( $B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real >/dev/null 2>&1; echo done > /tmp/model-ready ) &
timeout 300 $B/cuda_backend_test > $R/backend.txt 2>&1; echo "backend rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure" $R/backend.txt | head -20
timeout 100 $B/cuda_goldens_test > $R/goldens.txt 2>&1; echo "goldens rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $R/goldens.txt | head -8
DEEPINFER_TEST_BACKEND=cuda DEEPINFER_CUDA_FP8_ACT=1 timeout 100 $B/engine_model_test --gtest_filter='*/0:-*Cli*:*EqualsGoldens*:*ParallelSamplesShareThePrompt*' > $R/engine-fp8.txt 2>&1; echo "engine fp8 rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $R/engine-fp8.txt | head -5
$B/gpu_ceilings --json $R/ceilings.json > $R/ceilings.txt 2>&1; echo "ceilings rc=$? ($SECONDS s)"; tail -4 $R/ceilings.txt
while [ ! -f /tmp/model-ready ]; do sleep 1; done
DEEPINFER_CUDA_FP8_ACT=1 timeout 150 $B/gpu_model_bench --model /dev/shm/flash4 --ceilings $R/ceilings.json --batches 1,8,32 --contexts 4096 --prefill 4096,16384 --steps 8 --json $R/model-fp8.json > $R/model-fp8.txt 2>&1; echo "grid rc=$? ($SECONDS s)"; grep -E "^prefill P|^decode|GEMM part|^  RoutedExperts " $R/model-fp8.txt | head -20
DEEPINFER_CUDA_FP8_ACT=1 timeout 90 $B/gpu_model_bench --model /dev/shm/flash4 --batches 1 --contexts 16 --prefill 4096 --served-prefill 4096,16384 --step-budgets 8192 --steps 2 > $R/served.txt 2>&1; echo "served rc=$? ($SECONDS s)"; grep -iE "served|^prefill P" $R/served.txt | head -8
tar -cJf $OUT/o.tar.xz -C $OUT r

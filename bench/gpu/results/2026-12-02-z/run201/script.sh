#!/usr/bin/env bash
# Session 24 run 201: the e4m3 wgmma form of the dense decode Linears (k_linear_e4m3.cu): its tests, its
# per-call bench against the bf16 form, the decode step A/B; then the review mends' suites, FP8 engine
# tests, and the prefill GEMM part at 16k.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
export DEEPINFER_GOLDENS_DIR=$PWD/gpu-carry/goldens
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
( $B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real >/dev/null 2>&1; echo done > /tmp/model-ready ) &
timeout 120 $B/cuda_backend_test --gtest_filter='CudaLinearE4m3Test.*:CudaLinearStreamTest.*' > $R/e4m3-tests.txt 2>&1; echo "e4m3 tests rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure|rror" $R/e4m3-tests.txt | head -20
timeout 90 $B/cuda_backend_test --gtest_also_run_disabled_tests --gtest_filter='CudaLinearE4m3Test.DISABLED_Bench' > $R/e4m3-bench.txt 2>&1; echo "bench rc=$? ($SECONDS s)"; grep -E "T=" $R/e4m3-bench.txt | cut -c1-100
while [ ! -f /tmp/model-ready ]; do sleep 1; done
for t in 1 0 1 0 1 0; do
  DEEPINFER_LINEAR_STREAM_E4M3=$t DEEPINFER_CUDA_FP8_ACT=1 timeout 40 $B/gpu_model_bench --model /dev/shm/flash4 --batches 1,2,8,16,32 --contexts 4096 --steps 8 > $R/ab-$t-$SECONDS.txt 2>&1; echo "ab e4m3=$t rc=$? ($SECONDS s) $(grep -E '^decode|rror' $(ls -t $R/ab-$t-*.txt | head -1) | cut -c1-45 | sed 's/C=4096   step//' | tr -s ' ' | paste -sd' ')"
done
DEEPINFER_LINEAR_STREAM_E4M3=1 DEEPINFER_CUDA_FP8_ACT=1 timeout 60 $B/gpu_model_bench --model /dev/shm/flash4 --batches 8,32 --contexts 4096 --breakdown 8:4096,32:4096 --steps 8 > $R/bd-e4m3.txt 2>&1; echo "breakdown rc=$? ($SECONDS s)"
timeout 240 $B/cuda_backend_test --gtest_filter='CudaFp8Test.*:CudaCopyTest.*:CudaGraphTest.*:CudaMoeBlock128Test.*:*Model*' > $R/tests.txt 2>&1; echo "mends tests rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure" $R/tests.txt | head -12
DEEPINFER_LINEAR_STREAM_E4M3=1 DEEPINFER_TEST_BACKEND=cuda DEEPINFER_CUDA_FP8_ACT=1 timeout 120 $B/engine_model_test --gtest_filter='*/0:-*Cli*:*EqualsGoldens*:*ParallelSamplesShareThePrompt*' > $R/engine.txt 2>&1; echo "engine (e4m3 on) rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $R/engine.txt | head -6
DEEPINFER_CUDA_FP8_ACT=1 timeout 100 $B/gpu_model_bench --model /dev/shm/flash4 --batches 1 --contexts 16 --prefill 4096,16384 --prefill-breakdown 4096,16384 --steps 1 > $R/prefill.txt 2>&1; echo "prefill rc=$? ($SECONDS s)"; grep -E "^prefill P|GEMM part" $R/prefill.txt | cut -c1-120
tar -cJf $OUT/o.tar.xz -C $OUT r

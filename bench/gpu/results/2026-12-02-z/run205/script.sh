#!/usr/bin/env bash
# Session 24 run 205: CopyManyFromHost (CopyDeviceMany's kernel reads its descriptors from the pinned
# staging, one read per block): copy / graph / model suites, FP8 engine tests, decode A/B against the
# uploaded descriptors, and the graph segment size at B=1 / 8.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
export DEEPINFER_GOLDENS_DIR=$PWD/gpu-carry/goldens
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
( $B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real >/dev/null 2>&1; echo done > /tmp/model-ready ) &
timeout 200 $B/cuda_backend_test --gtest_filter='CudaCopyTest.*:CudaGraphTest.*:*Model*' > $R/tests.txt 2>&1; echo "tests rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure" $R/tests.txt | head -12
DEEPINFER_TEST_BACKEND=cuda DEEPINFER_CUDA_FP8_ACT=1 timeout 100 $B/engine_model_test --gtest_filter='*/0:-*Cli*:*EqualsGoldens*:*ParallelSamplesShareThePrompt*' > $R/engine.txt 2>&1; echo "engine rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $R/engine.txt | head -6
while [ ! -f /tmp/model-ready ]; do sleep 1; done
for r in 1 2 3; do for t in 1 0; do
  DEEPINFER_CUDA_COPY_MANY_FROM_HOST=$t DEEPINFER_CUDA_FP8_ACT=1 timeout 40 $B/gpu_model_bench --model /dev/shm/flash4 --batches 1,2,8,32 --contexts 4096 --steps 16 > $R/ab-$t-$r.txt 2>&1; echo "ab from-host=$t rc=$? ($SECONDS s) $(grep -E '^decode|rror' $R/ab-$t-$r.txt | cut -c1-45 | sed 's/C=4096   step//' | tr -s ' ' | paste -sd' ')"
done; done
for r in 1 2; do for seg in 32 64 0; do
  DEEPINFER_CUDA_GRAPH_SEGMENT=$seg DEEPINFER_CUDA_FP8_ACT=1 timeout 40 $B/gpu_model_bench --model /dev/shm/flash4 --batches 1,8 --contexts 4096 --steps 16 > $R/seg-$seg-$r.txt 2>&1; echo "seg=$seg rc=$? ($SECONDS s) $(grep -E '^decode|rror' $R/seg-$seg-$r.txt | cut -c1-45 | sed 's/C=4096   step//' | tr -s ' ' | paste -sd' ')"
done; done
DEEPINFER_CUDA_KERNEL_CENSUS=1 DEEPINFER_CUDA_FP8_ACT=1 timeout 40 $B/gpu_model_bench --model /dev/shm/flash4 --batches 1 --contexts 4096 --steps 4 > $R/census1.txt 2>&1; echo "census rc=$?"
tar -cJf $OUT/o.tar.xz -C $OUT r

#!/usr/bin/env bash
# Session 23 run 197: small uploads (CopyToDevice, CopyDeviceMany descriptors) as a PDL kernel reading the pinned host
# bytes before its wait (kernels::UploadPinned; DEEPINFER_CUDA_UPLOAD_KERNEL=0: cudaMemcpyAsync, memcpy nodes in the
# graphs, as before): tests, FP8 engine tests, then decode at B=1/8/32 interleaved off / on.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
export DEEPINFER_GOLDENS_DIR=$PWD/gpu-carry/goldens
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
( $B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real >/dev/null 2>&1; echo done > /tmp/model-ready ) &
timeout 150 $B/cuda_backend_test --gtest_filter='CudaCopyTest.*:CudaGraphTest.*:*Model*:CudaPdl*:CudaFp8Test.Small*:CudaIndexerPaged*' > $R/tests.txt 2>&1; echo "tests rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure|Actual|Expected" $R/tests.txt | head -12
DEEPINFER_TEST_BACKEND=cuda DEEPINFER_CUDA_FP8_ACT=1 timeout 90 $B/engine_model_test --gtest_filter='*/0:-*Cli*:*EqualsGoldens*:*ParallelSamplesShareThePrompt*' > $R/engine-fp8.txt 2>&1; echo "engine fp8 rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure" $R/engine-fp8.txt | head -6
DEEPINFER_TEST_BACKEND=cuda timeout 90 $B/engine_model_test --gtest_filter='*/0:-*Cli*:*ParallelSamplesShareThePrompt*' > $R/engine.txt 2>&1; echo "engine rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure" $R/engine.txt | head -6
while [ ! -f /tmp/model-ready ]; do sleep 1; done
for t in 0 1 0 1 0 1; do
  DEEPINFER_CUDA_UPLOAD_KERNEL=$t DEEPINFER_CUDA_FP8_ACT=1 timeout 40 $B/gpu_model_bench --model /dev/shm/flash4 --batches 1,8,32 --contexts 4096 --steps 8 > $R/grid-$t-$SECONDS.txt 2>&1; echo "grid upload-kernel=$t rc=$? ($SECONDS s)"; grep -E "^decode|rror" $(ls -t $R/grid-$t-*.txt | head -1) | cut -c1-45 | sed 's/C=4096   step//' | tr -s ' ' | paste -sd' '
done
tar -cJf $OUT/o.tar.xz -C $OUT r

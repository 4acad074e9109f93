#!/usr/bin/env bash
# Session 23 run 199: CopyDeviceMany's descriptors read by the copy kernel from the pinned staging before its PDL
# wait (kernels::CopyManyFromHost: no upload kernel before it), on top of run 198's code: copy / graph / model tests,
# decode A/B of DEEPINFER_CUDA_UPLOAD_KERNEL (0: memcpy nodes and uploaded descriptors) at B=1/8/32, the record grid.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
export DEEPINFER_GOLDENS_DIR=$PWD/gpu-carry/goldens
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
( $B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real >/dev/null 2>&1; echo done > /tmp/model-ready ) &
timeout 60 $B/cuda_backend_test --gtest_filter='CudaCopyTest.*:CudaGraphTest.*:*Model*' > $R/tests.txt 2>&1; echo "tests rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure" $R/tests.txt | head -8
while [ ! -f /tmp/model-ready ]; do sleep 1; done
for t in 1 0 1 0 1 0; do
  DEEPINFER_CUDA_UPLOAD_KERNEL=$t DEEPINFER_CUDA_FP8_ACT=1 timeout 40 $B/gpu_model_bench --model /dev/shm/flash4 --batches 1,8,32 --contexts 4096 --steps 16 > $R/ab-$t-$SECONDS.txt 2>&1; echo "ab upload-kernel=$t rc=$? ($SECONDS s)"; grep -E "^decode|rror" $(ls -t $R/ab-$t-*.txt | head -1) | cut -c1-45 | sed 's/C=4096   step//' | tr -s ' ' | paste -sd' '
done
DEEPINFER_CUDA_FP8_ACT=1 timeout 100 $B/gpu_model_bench --model /dev/shm/flash4 --ceilings gpu-carry/ceilings198.json --batches 1,8,32,128,256 --contexts 4096 --breakdown 1:4096,8:4096,32:4096,128:4096,256:4096 --prefill 4096,16384 --steps 8 --json $R/model-fp8.json > $R/model-fp8.txt 2>&1; echo "grid rc=$? ($SECONDS s)"; grep -E "^decode|^prefill P|GEMM part" $R/model-fp8.txt | cut -c1-110
tar -cJf $OUT/o.tar.xz -C $OUT r

#!/usr/bin/env bash
# Session 24 run 209: after removing LinearStream's fused-quantisation opt-in: the stream and model
# suites, then a decode grid at 4k.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
export DEEPINFER_GOLDENS_DIR=$PWD/gpu-carry/goldens
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
( $B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real >/dev/null 2>&1; echo done > /tmp/model-ready ) &
timeout 90 $B/cuda_backend_test --gtest_filter='CudaLinearStream*:*Model*:CudaFp8*' > $R/tests.txt 2>&1; echo "tests rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure" $R/tests.txt | head -8
while [ ! -f /tmp/model-ready ]; do sleep 1; done
DEEPINFER_CUDA_FP8_ACT=1 timeout 40 $B/gpu_model_bench --model /dev/shm/flash4 --batches 1,8,32 --contexts 4096 --steps 8 > $R/grid.txt 2>&1; echo "grid rc=$? ($SECONDS s) $(grep -E '^decode|rror' $R/grid.txt | cut -c1-45 | sed 's/C=4096   step//' | tr -s ' ' | paste -sd' ')"
tar -cJf $OUT/o.tar.xz -C $OUT r

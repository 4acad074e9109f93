#!/usr/bin/env bash
# Session 21 run 182: final grid of session 21's code (register expert GEMM at 202 SASS instructions per stage)
# with ceilings; goldens; the block-128 tests with a 5-slot ring (DEEPINFER_EXPERTS_RS_RING=5, experiment) and
# prefill with rings of 4 and 5; decode B=1/8/32/128/256 at 4k with breakdowns for the projection; served prefill.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
export DEEPINFER_GOLDENS_DIR=$PWD/gpu-carry/goldens
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
( $B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real >/dev/null 2>&1; echo done > /tmp/model-ready ) &
DEEPINFER_EXPERTS_RS_RING=5 timeout 60 $B/cuda_backend_test --gtest_filter='*MoeBlock128*' > $R/tests-ring5.txt 2>&1; echo "ring5 tests rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure" $R/tests-ring5.txt | head -10
timeout 100 $B/cuda_goldens_test > $R/goldens.txt 2>&1; echo "goldens rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $R/goldens.txt | head -8
$B/gpu_ceilings --json $R/ceilings.json > $R/ceilings.txt 2>&1; echo "ceilings rc=$? ($SECONDS s)"; tail -4 $R/ceilings.txt
while [ ! -f /tmp/model-ready ]; do sleep 1; done
for ring in 4 5 4 5; do
  DEEPINFER_EXPERTS_RS_RING=$ring DEEPINFER_CUDA_FP8_ACT=1 timeout 60 $B/gpu_model_bench --model /dev/shm/flash4 --batches 1 --contexts 16 --prefill 4096,16384 --steps 1 > $R/model-ring$ring-$SECONDS.txt 2>&1; echo "model ring=$ring rc=$? ($SECONDS s)"; grep -E "^prefill P|^  RoutedExperts " $(ls -t $R/model-ring$ring-*.txt | head -1) | head -4
done
DEEPINFER_CUDA_FP8_ACT=1 timeout 200 $B/gpu_model_bench --model /dev/shm/flash4 --ceilings $R/ceilings.json --batches 1,8,32,128,256 --contexts 4096 --breakdown 1:4096,32:4096,128:4096,256:4096 --prefill 4096,16384 --steps 8 --json $R/model-fp8.json > $R/model-fp8.txt 2>&1; echo "grid rc=$? ($SECONDS s)"; grep -E "^prefill P|^decode|GEMM part|^  RoutedExperts " $R/model-fp8.txt | head -24
DEEPINFER_CUDA_FP8_ACT=1 timeout 90 $B/gpu_model_bench --model /dev/shm/flash4 --batches 1 --contexts 16 --prefill 4096 --served-prefill 4096,16384 --step-budgets 8192 --steps 2 > $R/served.txt 2>&1; echo "served rc=$? ($SECONDS s)"; grep -iE "served|^prefill P" $R/served.txt | head -8
tar -cJf $OUT/o.tar.xz -C $OUT r

#!/usr/bin/env bash
# Session 21 run 184: EXPERIMENT -- the pipelined register GEMM (DEEPINFER_EXPERTS_RS_PIPE=1: no producer warp, 128
# registers, two fragment sets: stage i+1 converted while stage i's MMAs run). Block-128 / expert tests with it, then
# prefill 4k/16k with and without it.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
( $B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real >/dev/null 2>&1; echo done > /tmp/model-ready ) &
DEEPINFER_EXPERTS_RS_PIPE=1 timeout 90 $B/cuda_backend_test --gtest_filter='*MoeBlock128*:*Fp8Experts*' > $R/tests-pipe.txt 2>&1; trc=$?; echo "pipe tests rc=$trc ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure|rror" $R/tests-pipe.txt | head -12
while [ ! -f /tmp/model-ready ]; do sleep 1; done
for p in 1 0 1 0; do
  DEEPINFER_EXPERTS_RS_PIPE=$p DEEPINFER_CUDA_FP8_ACT=1 timeout 60 $B/gpu_model_bench --model /dev/shm/flash4 --batches 1 --contexts 16 --prefill 4096,16384 --steps 1 > $R/model-pipe$p-$SECONDS.txt 2>&1; echo "model pipe=$p rc=$? ($SECONDS s)"; grep -E "^prefill P|^  RoutedExperts |rror" $(ls -t $R/model-pipe$p-*.txt | head -1) | head -4
done
tar -cJf $OUT/o.tar.xz -C $OUT r

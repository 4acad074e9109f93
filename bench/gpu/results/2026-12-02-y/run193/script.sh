#!/usr/bin/env bash
# Session 23 run 193: the e4m3 decode experts on (env) through the whole cuda_backend_test and the FP8 engine tests;
# the GEMM variant sweep on the decode grid; the prefill direct GEMM against the register GEMM.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
export DEEPINFER_GOLDENS_DIR=$PWD/gpu-carry/goldens
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
( $B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real >/dev/null 2>&1; echo done > /tmp/model-ready ) &
DEEPINFER_EXPERTS_DECODE_E4M3=1 timeout 230 $B/cuda_backend_test > $R/tests.txt 2>&1; echo "tests e4m3=1 rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure|Expected|Which is|actual|relative" $R/tests.txt | head -30
DEEPINFER_EXPERTS_DECODE_E4M3=1 DEEPINFER_TEST_BACKEND=cuda DEEPINFER_CUDA_FP8_ACT=1 timeout 90 $B/engine_model_test --gtest_filter='*/0:-*Cli*:*EqualsGoldens*:*ParallelSamplesShareThePrompt*' > $R/engine-fp8.txt 2>&1; echo "engine fp8 e4m3=1 rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure" $R/engine-fp8.txt | head -8
while [ ! -f /tmp/model-ready ]; do sleep 1; done
for v in pf4 pf2 pipe2 pf2b3 pipe4 pf4 pf2 pipe2; do
  DEEPINFER_EXPERTS_DECODE_E4M3=1 DEEPINFER_EXPERTS_DECODE_E4M3_VARIANT=$v DEEPINFER_CUDA_FP8_ACT=1 timeout 40 $B/gpu_model_bench --model /dev/shm/flash4 --batches 1,8,32,128,256 --contexts 4096 --steps 8 > $R/grid-$v-$SECONDS.txt 2>&1; echo "grid $v rc=$? ($SECONDS s)"; grep -E "^decode|rror" $(ls -t $R/grid-$v-*.txt | head -1) | cut -c1-45 | tr -s ' ' | paste -sd' '
done
for g in rs direct rs direct; do
  DEEPINFER_EXPERTS_BLOCK128_GEMM=$g DEEPINFER_CUDA_FP8_ACT=1 timeout 45 $B/gpu_model_bench --model /dev/shm/flash4 --batches 1 --contexts 16 --prefill 4096,16384 --steps 1 > $R/prefill-$g-$SECONDS.txt 2>&1; echo "prefill $g rc=$? ($SECONDS s)"; grep -E "^prefill P|^  RoutedExperts |GEMM part|rror" $(ls -t $R/prefill-$g-*.txt | head -1) | head -6
done
tar -cJf $OUT/o.tar.xz -C $OUT r

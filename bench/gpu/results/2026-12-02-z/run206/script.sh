#!/usr/bin/env bash
# Session 24 run 206: the e4m3 form with two warpgroups a block (128 rows share one copy of x): tests,
# bench (pf8, pf12), decode A/B.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
export DEEPINFER_GOLDENS_DIR=$PWD/gpu-carry/goldens
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
( $B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real >/dev/null 2>&1; echo done > /tmp/model-ready ) &
timeout 120 $B/cuda_backend_test --gtest_filter='CudaLinearE4m3Test.*' > $R/e4m3-tests.txt 2>&1; echo "e4m3 tests rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure|rror|max .err" $R/e4m3-tests.txt | head -24
for v in pf8 pf12; do
DEEPINFER_LINEAR_E4M3_VARIANT=$v timeout 90 $B/cuda_backend_test --gtest_also_run_disabled_tests --gtest_filter='CudaLinearE4m3Test.DISABLED_Bench' > $R/e4m3-bench-$v.txt 2>&1; echo "bench $v rc=$? ($SECONDS s)"; grep -E "T=" $R/e4m3-bench-$v.txt | cut -c1-100
done
while [ ! -f /tmp/model-ready ]; do sleep 1; done
for r in 1 2; do for t in 0 1; do
  DEEPINFER_LINEAR_STREAM_E4M3=$t DEEPINFER_CUDA_FP8_ACT=1 timeout 40 $B/gpu_model_bench --model /dev/shm/flash4 --batches 1,8,16,32 --contexts 4096 --steps 8 > $R/ab-$t-$r.txt 2>&1; echo "ab e4m3=$t rc=$? ($SECONDS s) $(grep -E '^decode|rror' $R/ab-$t-$r.txt | cut -c1-45 | sed 's/C=4096   step//' | tr -s ' ' | paste -sd' ')"
done; done
tar -cJf $OUT/o.tar.xz -C $OUT r

#!/usr/bin/env bash
# Session 26 run 216: the whole cuda_backend_test on a96c76a + paired-row LinearStream (new test),
# the stream bench (16-row vs paired), decode A/B of DEEPINFER_LINEAR_STREAM_PAIR_MIN_T.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
( $B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real >/dev/null 2>&1; echo done > /tmp/model-ready ) &
timeout 80 $B/cuda_backend_test --gtest_filter='CudaLinearStreamTest.*' --gtest_also_run_disabled_tests > $R/stream.txt 2>&1; echo "stream tests+bench rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure" $R/stream.txt | head -12; grep -E "T=(1|8|16|24|32) split" $R/stream.txt | cut -c1-120
while [ ! -f /tmp/model-ready ]; do sleep 1; done
export DEEPINFER_CUDA_FP8_ACT=1
ab() {  # ab NAME ENV... : one decode grid
  local n=$1; shift
  env "$@" timeout 60 $B/gpu_model_bench --model /dev/shm/flash4 --batches 8,16,24,32 --contexts 4096 --steps 6 > $R/ab-$n-$SECONDS.txt 2>&1
  echo "ab $n rc=$? ($SECONDS s) $(grep -E '^decode|rror' $(ls -t $R/ab-$n-*.txt | head -1) | cut -c1-45 | sed 's/C=4096   step//;s/decode //' | tr -s ' ' | paste -sd' ')"
}
for r in 1 2; do ab off DEEPINFER_LINEAR_STREAM_PAIR_MIN_T=0; ab p17 DEEPINFER_LINEAR_STREAM_PAIR_MIN_T=17; ab p9 DEEPINFER_LINEAR_STREAM_PAIR_MIN_T=9; done
timeout 260 $B/cuda_backend_test --gtest_filter='-CudaLinearStreamTest.*' > $R/tests.txt 2>&1; echo "cuda_backend_test rest rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure" $R/tests.txt | head -12
tar -cJf $OUT/o.tar.xz -C $OUT r

#!/usr/bin/env bash
# Session 19 run 170: the register path with the weight rows by cp.async (16-byte, L2 256-byte prefetch) instead of
# 64-byte bulk copies; tests; prefill A/B: registers / off / copies; ncu.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
export DEEPINFER_GOLDENS_DIR=$PWD/gpu-carry/goldens
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
( $B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real >/dev/null 2>&1; echo done > /tmp/model-ready ) &
timeout 150 $B/cuda_backend_test --gtest_filter='*MoeBlock128*' > $R/tests.txt 2>&1; trc=$?; echo "tests rc=$trc ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure|Expected|Which is|actual|relative" $R/tests.txt | head -30
[ $trc = 124 ] && { echo "tests timed out: skipping the rest"; tar -cJf $OUT/o.tar.xz -C $OUT r; exit 1; }
while [ ! -f /tmp/model-ready ]; do sleep 1; done
for cfg in "1 0" "0 0" "1 0"; do
  set -- $cfg
  DEEPINFER_EXPERTS_BLOCK128=$1 DEEPINFER_EXPERTS_FP8_COPY_GIB=$2 DEEPINFER_CUDA_FP8_ACT=1 timeout 60 $B/gpu_model_bench --model /dev/shm/flash4 --batches 1 --contexts 4096 --prefill 4096,16384 --steps 2 > $R/model-b$1-gib$2-$SECONDS.txt 2>&1; echo "model block128=$1 gib=$2 rc=$? ($SECONDS s)"; grep -E "^prefill P|^  RoutedExperts |rror|WARN" $(ls -t $R/model-b$1-gib$2-*.txt | head -1) | tail -5
done
DEEPINFER_CUDA_FP8_ACT=1 timeout 90 ncu --clock-control none --kernel-name regex:"ExpertGemmMxfp4|PackItems" --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_bytes.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active --csv --page raw $B/gpu_model_bench --model /dev/shm/flash4 --batches 1 --contexts 16 --prefill 4096 --steps 1 > $R/ncu-rs.csv 2> $R/ncu.err; echo "ncu rc=$? ($SECONDS s)"
tar -cJf $OUT/o.tar.xz -C $OUT r

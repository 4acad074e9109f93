#!/usr/bin/env bash
# Session 19 run 164: routed experts on FP8 tensor cores over block-128 expert copies
# (k_moe_block128.cu): its tests, the 4-layer prefill A/B (copy budget 0 / 64 GiB), ncu per kernel.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
export DEEPINFER_GOLDENS_DIR=$PWD/gpu-carry/goldens
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
( $B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real >/dev/null 2>&1; echo done > /tmp/model-ready ) &
timeout 120 $B/cuda_backend_test --gtest_filter='*MoeBlock128*' > $R/tests-block128.txt 2>&1; echo "block128 tests rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure|error|Expected|Which is|actual|max " $R/tests-block128.txt | head -40
while [ ! -f /tmp/model-ready ]; do sleep 1; done
for gib in 0 64 0 64; do
  DEEPINFER_EXPERTS_FP8_COPY_GIB=$gib DEEPINFER_CUDA_FP8_ACT=1 timeout 90 $B/gpu_model_bench --model /dev/shm/flash4 --batches 1 --contexts 4096 --prefill 4096,16384 --steps 2 > $R/model-gib$gib-$SECONDS.txt 2>&1; echo "model gib=$gib rc=$? ($SECONDS s)"; grep -E "^prefill P|^decode|^  RoutedExperts |rror|WARN" $R/model-gib$gib-*.txt | tail -6
done
DEEPINFER_EXPERTS_FP8_COPY_GIB=64 DEEPINFER_CUDA_FP8_ACT=1 timeout 120 ncu --clock-control none --kernel-name regex:'ExpertGemmBlock128|SwiGluBlock128|QuantizeBlock128|CombineSlots|CountPairs|FillGroups' --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active --csv --page raw $B/gpu_model_bench --model /dev/shm/flash4 --batches 1 --contexts 16 --prefill 4096 --steps 1 > $R/ncu-block128.csv 2> $R/ncu-block128.err; echo "ncu rc=$? ($SECONDS s)"
tar -cJf $OUT/o.tar.xz -C $OUT r

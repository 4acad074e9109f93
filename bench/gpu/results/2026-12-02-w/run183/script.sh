#!/usr/bin/env bash
# Session 21 run 183: the final binary of session 21 (ring of 4, no knobs): block-128 tests, prefill 4k/16k, and ncu's
# warp-state and scheduler statistics of one register expert GEMM launch (what bounds it at 202 instructions per stage).
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
( $B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real >/dev/null 2>&1; echo done > /tmp/model-ready ) &
timeout 60 $B/cuda_backend_test --gtest_filter='*MoeBlock128*' > $R/tests.txt 2>&1; echo "tests rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure" $R/tests.txt | head -10
while [ ! -f /tmp/model-ready ]; do sleep 1; done
DEEPINFER_CUDA_FP8_ACT=1 timeout 60 $B/gpu_model_bench --model /dev/shm/flash4 --batches 1 --contexts 16 --prefill 4096,16384 --steps 1 > $R/model.txt 2>&1; echo "model rc=$? ($SECONDS s)"; grep -E "^prefill P|^  RoutedExperts " $R/model.txt | head -4
DEEPINFER_CUDA_FP8_ACT=1 timeout 150 ncu --clock-control none --kernel-name regex:ExpertGemmMxfp4 --launch-skip 2 --launch-count 1 --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis $B/gpu_model_bench --model /dev/shm/flash4 --batches 1 --contexts 16 --prefill 4096 --steps 1 > $R/ncu.txt 2> $R/ncu.err; echo "ncu rc=$? ($SECONDS s)"
grep -E "Stall|Warp Cycles|Issued|Eligible|No Eligible|Active Warps|Throughput|Busy|Pipe|Bank|Hit Rate|Duration" $R/ncu.txt | head -60
tar -cJf $OUT/o.tar.xz -C $OUT r

#!/usr/bin/env bash
# Session 24 run 203: the e4m3 form with one wgmma m64nNk32 per step (N = 8 x token tiles): tests, bench,
# ncu (wo_b, idx_wq_b at T=1 and T=32: e4m3 against the bf16 form), decode A/B.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
export DEEPINFER_GOLDENS_DIR=$PWD/gpu-carry/goldens
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
( $B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real >/dev/null 2>&1; echo done > /tmp/model-ready ) &
timeout 120 $B/cuda_backend_test --gtest_filter='CudaLinearE4m3Test.*' > $R/e4m3-tests.txt 2>&1; echo "e4m3 tests rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure|rror|max .err" $R/e4m3-tests.txt | head -24
timeout 90 $B/cuda_backend_test --gtest_also_run_disabled_tests --gtest_filter='CudaLinearE4m3Test.DISABLED_Bench' > $R/e4m3-bench.txt 2>&1; echo "bench rc=$? ($SECONDS s)"; grep -E "T=" $R/e4m3-bench.txt | cut -c1-100
M=gpu__time_duration.sum,dram__bytes_read.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,sm__ctas_launched.sum,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_membar_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio,smsp__average_warps_issue_stalled_misc_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_branch_resolving_per_issue_active.ratio,smsp__average_warps_issue_stalled_drain_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_selected_per_issue_active.ratio
for sh in wo_b idx_wq_b; do for k in LinearE4m3Kernel LinearStreamKernel; do
  DEEPINFER_BENCH_SHAPE=$sh timeout 100 ncu --clock-control none --kernel-name regex:"$k" --launch-skip 3 --launch-count 1 --metrics $M --csv --print-units base --page raw $B/cuda_backend_test --gtest_also_run_disabled_tests --gtest_filter='CudaLinearE4m3Test.DISABLED_Bench' > $R/ncu-$sh-$k.csv 2> $R/ncu-$sh-$k.err; echo "ncu $sh $k rc=$? ($SECONDS s)"
done; done
DEEPINFER_BENCH_SHAPE=wo_b timeout 100 ncu --clock-control none --kernel-name regex:LinearE4m3Kernel --launch-skip 3 --launch-count 1 --section WarpStateStats --section SourceCounters --page source --print-source sass --csv $B/cuda_backend_test --gtest_also_run_disabled_tests --gtest_filter='CudaLinearE4m3Test.DISABLED_Bench' > $R/ncu-src-wo_b.csv 2> $R/ncu-src.err; echo "ncu source rc=$? ($SECONDS s)"
while [ ! -f /tmp/model-ready ]; do sleep 1; done
for r in 1 2; do for t in 0 1; do
  DEEPINFER_LINEAR_STREAM_E4M3=$t DEEPINFER_CUDA_FP8_ACT=1 timeout 40 $B/gpu_model_bench --model /dev/shm/flash4 --batches 1,8,16,32 --contexts 4096 --steps 8 > $R/ab-$t-$r.txt 2>&1; echo "ab e4m3=$t rc=$? ($SECONDS s) $(grep -E '^decode|rror' $R/ab-$t-$r.txt | cut -c1-45 | sed 's/C=4096   step//' | tr -s ' ' | paste -sd' ')"
done; done
tar -cJf $OUT/o.tar.xz -C $OUT r

#!/usr/bin/env bash
# Session 20 run 173: verify 6d7035e's mends (block-128 / FP8 tests); register path item widths 64/96/128;
# ncu of the decode expert GEMMs (stalls) at B=1, 8, 32; ncu source stalls of the register kernel.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
export DEEPINFER_GOLDENS_DIR=$PWD/gpu-carry/goldens
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
( $B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real >/dev/null 2>&1; echo done > /tmp/model-ready ) &
timeout 200 $B/cuda_backend_test --gtest_filter='*MoeBlock128*:*Block128*:*Fp8*:*Runtime*' > $R/tests.txt 2>&1; trc=$?; echo "tests rc=$trc ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure" $R/tests.txt | head -20
while [ ! -f /tmp/model-ready ]; do sleep 1; done
for ip in 64 128 96 64; do
  DEEPINFER_EXPERTS_BLOCK128_ITEM_PAIRS=$ip DEEPINFER_CUDA_FP8_ACT=1 timeout 60 $B/gpu_model_bench --model /dev/shm/flash4 --batches 1 --contexts 16 --prefill 4096,16384 --steps 1 > $R/model-ip$ip-$SECONDS.txt 2>&1; echo "model items=$ip rc=$? ($SECONDS s)"; grep -E "^prefill P|^  RoutedExperts |rror" $(ls -t $R/model-ip$ip-*.txt | head -1) | tail -4
done
M="gpu__time_duration.sum,dram__bytes_read.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,lts__t_bytes.sum"
for b in 1 8 32; do
  DEEPINFER_CUDA_FP8_ACT=1 timeout 100 ncu --clock-control none --profile-from-start off --csv --print-units base --metrics $M $B/gpu_model_bench --model /dev/shm/flash4 --batches $b --contexts 4096 --steps 1 --profile-step > $R/ncu-decode-b$b.csv 2> $R/ncu-decode-b$b.err; echo "ncu decode b=$b rc=$? ($SECONDS s)"
  python3 bench/gpu/ncu_summary.py $R/ncu-decode-b$b.csv --top 12 --hbm-gbps 4500 > $R/ncu-decode-b$b.txt 2>&1; head -16 $R/ncu-decode-b$b.txt
done
DEEPINFER_CUDA_FP8_ACT=1 timeout 120 ncu --clock-control none --kernel-name regex:ExpertGemmMxfp4 --launch-count 1 --section WarpStateStats --section SourceCounters --page source --print-source sass --csv $B/gpu_model_bench --model /dev/shm/flash4 --batches 1 --contexts 16 --prefill 4096 --steps 1 > $R/ncu-rs-src.csv 2> $R/ncu-rs-src.err; echo "ncu rs src rc=$? ($SECONDS s)"
python3 bench/gpu/ncu_stalls.py $R/ncu-rs-src.csv --phases > $R/ncu-rs-phases.txt 2>&1; python3 bench/gpu/ncu_stalls.py $R/ncu-rs-src.csv --top 40 > $R/ncu-rs-top.txt 2>&1; head -50 $R/ncu-rs-top.txt
tar -cJf $OUT/o.tar.xz -C $OUT r

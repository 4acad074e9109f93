#!/usr/bin/env bash
# Session 26 run 217: the 8 tests that run 216 ran with DEEPINFER_CUDA_FP8_ACT leaked into them, without it;
# ncu of the decode indexer (IndexerMmaKernel, paged) at B=32 / 128; the issue 9 grid with breakdowns for the
# projection (code of a96c76a).
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
( $B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real >/dev/null 2>&1; echo done > /tmp/model-ready ) &
timeout 100 $B/cuda_backend_test --gtest_filter='CudaDenseTest.*:CudaRoutedExpertsTest.*' > $R/tests.txt 2>&1; echo "dense + routed tests rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure" $R/tests.txt | head -12
while [ ! -f /tmp/model-ready ]; do sleep 1; done
export DEEPINFER_CUDA_FP8_ACT=1
M="gpu__time_duration.sum,dram__bytes_read.sum,lts__t_bytes.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,sm__ctas_launched.sum,launch__grid_size,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio"
for b in 32 128; do
  DEEPINFER_CUDA_GRAPHS=0 timeout 90 ncu --clock-control none --kernel-name regex:IndexerMmaKernel --launch-skip 3 --launch-count 3 --csv --print-units base --metrics $M $B/gpu_model_bench --model /dev/shm/flash4 --batches $b --contexts 4096 --steps 2 > $R/ncu-idx-b$b.csv 2> $R/ncu-idx-b$b.err; echo "ncu idx b=$b rc=$? ($SECONDS s)"
  python3 bench/gpu/ncu_summary.py $R/ncu-idx-b$b.csv --launches --hbm-gbps 4513 > $R/ncu-idx-b$b.txt 2>&1; head -12 $R/ncu-idx-b$b.txt | cut -c1-250
done
DEEPINFER_CUDA_GRAPHS=0 timeout 90 ncu --clock-control none --kernel-name regex:IndexerMmaKernel --launch-skip 3 --launch-count 1 --section WarpStateStats --section SourceCounters --page source --print-source sass --csv $B/gpu_model_bench --model /dev/shm/flash4 --batches 128 --contexts 4096 --steps 2 > $R/ncu-idx-src.csv 2> $R/ncu-idx-src.err; echo "ncu idx src rc=$? ($SECONDS s)"
python3 bench/gpu/ncu_stalls.py $R/ncu-idx-src.csv --top 30 > $R/ncu-idx-top.txt 2>&1; head -34 $R/ncu-idx-top.txt | cut -c1-140
DEEPINFER_CUDA_GRAPHS=0 timeout 90 ncu --clock-control none --kernel-name regex:IndexerMmaKernel --launch-skip 3 --launch-count 1 --section LaunchStats --section Occupancy --section SpeedOfLight --section MemoryWorkloadAnalysis $B/gpu_model_bench --model /dev/shm/flash4 --batches 128 --contexts 4096 --steps 2 > $R/ncu-idx-details.txt 2>&1; echo "ncu idx details rc=$? ($SECONDS s)"; grep -E "Occupancy|Block Limit|Waves|Duration|Throughput|Registers|Shared Memory|Grid Size|Hit" $R/ncu-idx-details.txt | head -30
timeout 200 $B/gpu_model_bench --model /dev/shm/flash4 --ceilings gpu-carry/ceilings-run213.json --batches 1,8,32,128,256 --contexts 4096 --breakdown 1:4096,8:4096,32:4096,128:4096,256:4096 --prefill 4096,16384 --steps 8 --json $R/model-fp8.json > $R/model-fp8.txt 2>&1; echo "grid rc=$? ($SECONDS s)"; grep -E "^decode|^prefill P|GEMM part" $R/model-fp8.txt | cut -c1-110
tar -cJf $OUT/o.tar.xz -C $OUT r

#!/usr/bin/env bash
# Session 26 run 218: the decode indexer's key staging writes only the hi terms when the tile splits exactly
# (StageRowKeyTile): the indexer and stream suites, ncu of IndexerMmaKernel at B=32 / 128 (against run 217),
# decode grids.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
( $B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real >/dev/null 2>&1; echo done > /tmp/model-ready ) &
timeout 150 $B/cuda_backend_test --gtest_filter='*Indexer*:CudaLinearStreamTest.*' > $R/tests.txt 2>&1; echo "indexer + stream tests rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure" $R/tests.txt | head -12
while [ ! -f /tmp/model-ready ]; do sleep 1; done
export DEEPINFER_CUDA_FP8_ACT=1
M="gpu__time_duration.sum,dram__bytes_read.sum,lts__t_bytes.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,sm__ctas_launched.sum,launch__grid_size,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio"
for b in 32 128; do
  DEEPINFER_CUDA_GRAPHS=0 timeout 90 ncu --clock-control none --kernel-name regex:IndexerMmaKernel --launch-skip 3 --launch-count 3 --csv --print-units base --metrics $M $B/gpu_model_bench --model /dev/shm/flash4 --batches $b --contexts 4096 --steps 2 > $R/ncu-idx-b$b.csv 2> $R/ncu-idx-b$b.err; echo "ncu idx b=$b rc=$? ($SECONDS s)"
  python3 bench/gpu/ncu_summary.py $R/ncu-idx-b$b.csv --launches --hbm-gbps 4513 > $R/ncu-idx-b$b.txt 2>&1; head -6 $R/ncu-idx-b$b.txt | cut -c1-250
done
for r in 1 2; do
  timeout 60 $B/gpu_model_bench --model /dev/shm/flash4 --batches 8,32,128,256 --contexts 4096 --steps 6 > $R/grid-$r.txt 2>&1; echo "grid $r rc=$? ($SECONDS s) $(grep -E '^decode|rror' $R/grid-$r.txt | cut -c1-45 | sed 's/C=4096   step//;s/decode //' | tr -s ' ' | paste -sd' ')"
done
tar -cJf $OUT/o.tar.xz -C $OUT r

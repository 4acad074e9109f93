#!/usr/bin/env bash
# Session 26 run 221: the decode indexer's L2 hint distance (DEEPINFER_INDEXER_L2_TILES; 2 = the code so far):
# indexer tests at 2 and 4, ncu durations of IndexerMmaKernel at B=128 / 32 per distance, decode A/B.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
( $B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real >/dev/null 2>&1; echo done > /tmp/model-ready ) &
for d in 2 4; do
  DEEPINFER_INDEXER_L2_TILES=$d timeout 100 $B/cuda_backend_test --gtest_filter='*Indexer*' > $R/tests-l2t$d.txt 2>&1; echo "indexer tests L2 tiles $d rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure" $R/tests-l2t$d.txt | head -6
done
while [ ! -f /tmp/model-ready ]; do sleep 1; done
export DEEPINFER_CUDA_FP8_ACT=1
M="gpu__time_duration.sum,dram__bytes_read.sum,lts__t_bytes.sum,lts__t_sector_hit_rate.pct,smsp__issue_active.avg.pct_of_peak_sustained_active"
nc() {  # nc BATCH TILES
  DEEPINFER_INDEXER_L2_TILES=$2 DEEPINFER_CUDA_GRAPHS=0 timeout 60 ncu --clock-control none --kernel-name regex:IndexerMmaKernel --launch-skip 3 --launch-count 3 --csv --print-units base --metrics $M $B/gpu_model_bench --model /dev/shm/flash4 --batches $1 --contexts 4096 --steps 2 > $R/ncu-b$1-t$2.csv 2>/dev/null
  python3 bench/gpu/ncu_summary.py $R/ncu-b$1-t$2.csv --launches --hbm-gbps 4513 > $R/ncu-b$1-t$2.txt 2>&1
  echo "ncu B=$1 L2 tiles $2 ($SECONDS s): $(awk '/IndexerMma/ {printf "%s us %s TB/s | ", $8, $10}' $R/ncu-b$1-t$2.txt)"
}
for t in 2 0 3 4 6; do nc 128 $t; done
for t in 2 0 4; do nc 32 $t; done
for r in 1 2; do for t in 2 4; do
  DEEPINFER_INDEXER_L2_TILES=$t timeout 60 $B/gpu_model_bench --model /dev/shm/flash4 --batches 32,128,256 --contexts 4096 --steps 6 > $R/ab-t$t-$r.txt 2>&1; echo "ab L2 tiles $t rc=$? ($SECONDS s) $(grep -E '^decode|rror' $R/ab-t$t-$r.txt | cut -c1-45 | sed 's/C=4096   step//;s/decode //' | tr -s ' ' | paste -sd' ')"
done; done
rm -f $R/*.csv
tar -cJf $OUT/o.tar.xz -C $OUT r

#!/usr/bin/env bash
# Session 26 run 222: the indexer's L2 hint distance at 32k context (ncu per call at B=8 / 32, decode A/B).
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
$B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real >/dev/null 2>&1; echo "model ($SECONDS s)"
export DEEPINFER_CUDA_FP8_ACT=1
M="gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct,smsp__issue_active.avg.pct_of_peak_sustained_active"
nc() {  # nc BATCH TILES
  DEEPINFER_INDEXER_L2_TILES=$2 DEEPINFER_CUDA_GRAPHS=0 timeout 80 ncu --clock-control none --kernel-name regex:IndexerMmaKernel --launch-skip 3 --launch-count 3 --csv --print-units base --metrics $M $B/gpu_model_bench --model /dev/shm/flash4 --batches $1 --contexts 32768 --steps 2 > $R/ncu32k-b$1-t$2.csv 2>/dev/null
  python3 bench/gpu/ncu_summary.py $R/ncu32k-b$1-t$2.csv --launches --hbm-gbps 4513 > $R/ncu32k-b$1-t$2.txt 2>&1
  echo "ncu 32k B=$1 L2 tiles $2 ($SECONDS s): $(awk '/IndexerMma/ {printf "%s us %s TB/s | ", $8, $10}' $R/ncu32k-b$1-t$2.txt)"
}
for b in 1 8 32; do for t in 2 0; do nc $b $t; done; done
for r in 1 2; do for t in 2 0; do
  DEEPINFER_INDEXER_L2_TILES=$t timeout 80 $B/gpu_model_bench --model /dev/shm/flash4 --batches 1,8,32 --contexts 32768 --steps 6 > $R/ab32k-t$t-$r.txt 2>&1; echo "ab 32k L2 tiles $t rc=$? ($SECONDS s) $(grep -E '^decode|rror' $R/ab32k-t$t-$r.txt | cut -c1-45 | sed 's/C=32768  step//;s/decode //' | tr -s ' ' | paste -sd' ')"
done; done
rm -f $R/*.csv
tar -cJf $OUT/o.tar.xz -C $OUT r

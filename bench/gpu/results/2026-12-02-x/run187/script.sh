#!/usr/bin/env bash
# Session 22 run 187: why the decode expert GEMMs read 15-35% more DRAM bytes than the distinct experts hold (run 186):
# load-hint variants of the stream kernel (DEEPINFER_STREAM_LOAD_HINT 0 = L2::256B as committed, 1 = L2::128B, 2 = none,
# 3 = 256B + L2 evict_first policy, 4 = 0 + scale bytes evict_last): ncu L2/DRAM counters at B=256, then decode steps.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
$B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real >/dev/null 2>&1; echo "model made ($SECONDS s)"
M=gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum,lts__t_requests_srcunit_tex_op_read.sum,smsp__issue_active.avg.pct_of_peak_sustained_active
for h in 0 1 2 3 4; do
  DEEPINFER_STREAM_LOAD_HINT=$h DEEPINFER_CUDA_GRAPHS=0 DEEPINFER_CUDA_FP8_ACT=1 timeout 100 ncu --clock-control none --kernel-name regex:"ExpertStream" --launch-skip 40 --launch-count 4 --metrics $M --csv --print-units base --page raw $B/gpu_model_bench --model /dev/shm/flash4 --batches 256 --contexts 4096 --steps 1 > $R/ncu-h$h.csv 2> $R/ncu-h$h.err; echo "ncu hint=$h rc=$? ($SECONDS s)"
  python3 gpu-carry/ncu_l2.py $R/ncu-h$h.csv
done
for h in 0 1 2 3 4 0 3; do
  DEEPINFER_STREAM_LOAD_HINT=$h DEEPINFER_CUDA_FP8_ACT=1 timeout 100 $B/gpu_model_bench --model /dev/shm/flash4 --batches 8,32,128,256 --contexts 4096 --steps 8 > $R/grid-h$h-$SECONDS.txt 2>&1; echo "grid hint=$h rc=$? ($SECONDS s)"; grep -E "^decode" $(ls -t $R/grid-h$h-*.txt | head -1) | cut -c1-60
done
tar -cJf $OUT/o.tar.xz -C $OUT r

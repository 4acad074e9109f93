#!/usr/bin/env bash
# Session 22 run 186: decode expert questions. (1) the decode grid with the stream kernel (default) against the block-128
# register wgmma kernel forced at decode (DEEPINFER_EXPERTS_STREAM_MAX_PAIRS=0); (2) ncu of the decode expert GEMMs at
# B=32/128/256 (graphs off): time, DRAM bytes, issue, warps.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
$B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real >/dev/null 2>&1; echo "model made ($SECONDS s)"
for mp in d 0 d 0; do
  if [ $mp = d ]; then unset DEEPINFER_EXPERTS_STREAM_MAX_PAIRS; else export DEEPINFER_EXPERTS_STREAM_MAX_PAIRS=$mp; fi
  DEEPINFER_CUDA_FP8_ACT=1 timeout 120 $B/gpu_model_bench --model /dev/shm/flash4 --batches 1,8,32,128,256 --contexts 4096 --steps 8 > $R/grid-$mp-$SECONDS.txt 2>&1; echo "grid maxpairs=$mp rc=$? ($SECONDS s)"; grep -E "^decode" $(ls -t $R/grid-$mp-*.txt | head -1) | head -8
done
unset DEEPINFER_EXPERTS_STREAM_MAX_PAIRS
M=gpu__time_duration.sum,dram__bytes_read.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,smsp__warps_active.avg.per_cycle_active,lts__t_bytes.sum
for b in 32 256; do
  DEEPINFER_CUDA_GRAPHS=0 DEEPINFER_CUDA_FP8_ACT=1 timeout 150 ncu --clock-control none --kernel-name regex:"ExpertStream|ExpertGemm" --launch-skip 40 --launch-count 16 --metrics $M --csv --print-units base --page raw $B/gpu_model_bench --model /dev/shm/flash4 --batches $b --contexts 4096 --steps 2 > $R/ncu-$b.csv 2> $R/ncu-$b.err; echo "ncu B=$b rc=$? ($SECONDS s)"
  python3 gpu-carry/ncu_agg.py $R/ncu-$b.csv
done
tar -cJf $OUT/o.tar.xz -C $OUT r

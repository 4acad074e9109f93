#!/usr/bin/env bash
# Session 22 run 188: grouped weight loads in the decode expert stream kernel (DEEPINFER_STREAM_LOAD = 10 hint + group:
# hint 0 L2::256B (committed), 1 L2::128B, 2 none; group G = a row's G steps requested together when the last of G
# ring slots is free). ncu DRAM/L2 at B=256, then decode steps; shape w4pf8s8 (8 steps in flight) with groups of 4.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
$B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real >/dev/null 2>&1; echo "model made ($SECONDS s)"
M=gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum,lts__t_requests_srcunit_tex_op_read.sum,smsp__issue_active.avg.pct_of_peak_sustained_active
for v in d:1 d:11 d:2 d:12 d:22 w4pf8s8:4 w4pf8s8:24 w4pf8s8:14; do
  sh=${v%%:*}; code=${v##*:}; if [ $sh = d ]; then unset DEEPINFER_EXPERTS_STREAM_VARIANT; else export DEEPINFER_EXPERTS_STREAM_VARIANT=$sh; fi
  DEEPINFER_STREAM_LOAD=$code DEEPINFER_CUDA_GRAPHS=0 DEEPINFER_CUDA_FP8_ACT=1 timeout 100 ncu --clock-control none --kernel-name regex:"ExpertStream" --launch-skip 40 --launch-count 2 --metrics $M --csv --print-units base --page raw $B/gpu_model_bench --model /dev/shm/flash4 --batches 256 --contexts 4096 --steps 1 > $R/ncu-$sh-$code.csv 2> $R/ncu-$sh-$code.err; echo "ncu $v rc=$? ($SECONDS s)"
  python3 gpu-carry/ncu_l2.py $R/ncu-$sh-$code.csv
done
for v in d:1 d:11 d:12 d:22 d:2 w4pf8s8:4 w4pf8s8:24 d:1 d:12 w4pf8s8:24; do
  sh=${v%%:*}; code=${v##*:}; if [ $sh = d ]; then unset DEEPINFER_EXPERTS_STREAM_VARIANT; else export DEEPINFER_EXPERTS_STREAM_VARIANT=$sh; fi
  DEEPINFER_STREAM_LOAD=$code DEEPINFER_CUDA_FP8_ACT=1 timeout 100 $B/gpu_model_bench --model /dev/shm/flash4 --batches 8,32,128,256 --contexts 4096 --steps 8 > $R/grid-$sh-$code-$SECONDS.txt 2>&1; echo "grid $v rc=$? ($SECONDS s)"; grep -E "^decode" $(ls -t $R/grid-$sh-$code-*.txt | head -1) | cut -c1-45 | tr -s ' ' | paste -sd' '
done
tar -cJf $OUT/o.tar.xz -C $OUT r

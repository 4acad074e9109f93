#!/usr/bin/env bash
# Session 25 run 210: where the non-expert B=32 decode time goes on today's code (ncu census of one
# step, graphs off), ncu stalls of SparseAttentionMmaKernel at B=32, and the attention launch knobs
# (splits, stages, the prefill kernel from fewer tokens) A/B at B=8..64 (same bits for splits/stages).
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
$B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real > $R/make.txt 2>&1; echo "model rc=$? ($SECONDS s)"
export DEEPINFER_CUDA_FP8_ACT=1
ab() {  # ab NAME ENV... : one decode grid
  local n=$1; shift
  env "$@" timeout 60 $B/gpu_model_bench --model /dev/shm/flash4 --batches 8,16,32,64 --contexts 4096 --steps 6 > $R/ab-$n-$SECONDS.txt 2>&1
  echo "ab $n rc=$? ($SECONDS s) $(grep -E '^decode|rror' $(ls -t $R/ab-$n-*.txt | head -1) | cut -c1-45 | sed 's/C=4096   step//' | tr -s ' ' | paste -sd' ')"
}
for r in 1 2; do
  ab def X=0; ab s1 DEEPINFER_ATTN_SPLITS=1; ab s4 DEEPINFER_ATTN_SPLITS=4; ab st3 DEEPINFER_ATTN_MMA_STAGES=3; ab pf8 DEEPINFER_ATTN_PREFILL_MIN_TOKENS=8
done
M="gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,sm__ctas_launched.sum,launch__grid_size,launch__cluster_dim_x,launch__cluster_dim_y,launch__cluster_dim_z,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio"
for b in 32; do
  DEEPINFER_CUDA_GRAPHS=0 timeout 150 ncu --clock-control none --profile-from-start off --csv --print-units base --metrics $M $B/gpu_model_bench --model /dev/shm/flash4 --batches $b --contexts 4096 --steps 1 --profile-step > $R/ncu-decode-b$b.csv 2> $R/ncu-decode-b$b.err; echo "ncu decode b=$b rc=$? ($SECONDS s)"
  python3 bench/gpu/ncu_summary.py $R/ncu-decode-b$b.csv --top 40 --hbm-gbps 4500 > $R/ncu-decode-b$b.txt 2>&1; head -44 $R/ncu-decode-b$b.txt | cut -c1-120
done
DEEPINFER_CUDA_GRAPHS=0 timeout 120 ncu --clock-control none --kernel-name regex:SparseAttentionMmaKernel --launch-skip 12 --launch-count 1 --section WarpStateStats --section SourceCounters --section LaunchStats --section Occupancy --page source --print-source sass --csv $B/gpu_model_bench --model /dev/shm/flash4 --batches 32 --contexts 4096 --steps 2 > $R/ncu-attn-src.csv 2> $R/ncu-attn-src.err; echo "ncu attn src rc=$? ($SECONDS s)"
python3 bench/gpu/ncu_stalls.py $R/ncu-attn-src.csv --phases > $R/ncu-attn-phases.txt 2>&1; head -40 $R/ncu-attn-phases.txt
DEEPINFER_CUDA_GRAPHS=0 timeout 120 ncu --clock-control none --kernel-name regex:SparseAttentionMmaKernel --launch-skip 12 --launch-count 1 --section LaunchStats --section Occupancy --section SpeedOfLight --section MemoryWorkloadAnalysis $B/gpu_model_bench --model /dev/shm/flash4 --batches 32 --contexts 4096 --steps 2 > $R/ncu-attn-details.txt 2>&1; echo "ncu attn details rc=$? ($SECONDS s)"; grep -E "Cluster|Occupancy|Block Limit|Waves|Duration|Throughput|Registers|Shared Memory" $R/ncu-attn-details.txt | head -40
tar -cJf $OUT/o.tar.xz -C $OUT r

#!/usr/bin/env bash
# Session 19 run 168: the final grid with the block-128 expert copies (64 GiB budget), prefill as
# served, ncu of the GEMM at items of 64.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
( $B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real >/dev/null 2>&1; echo done > /tmp/model-ready ) &
$B/gpu_ceilings --json $R/ceilings.json > $R/ceilings.txt 2>&1; echo "ceilings rc=$? ($SECONDS s)"; tail -4 $R/ceilings.txt
while [ ! -f /tmp/model-ready ]; do sleep 1; done
DEEPINFER_EXPERTS_FP8_COPY_GIB=64 DEEPINFER_CUDA_FP8_ACT=1 timeout 200 $B/gpu_model_bench --model /dev/shm/flash4 --ceilings $R/ceilings.json --batches 1,8,32,128,256 --contexts 4096,32768 --prefill 4096,16384 --breakdown 1:4096,32:4096 --steps 8 --json $R/model-fp8.json > $R/model-fp8.txt 2>&1; echo "grid rc=$? ($SECONDS s)"; grep -E "^prefill P|^decode|GEMM part|ours/ref|^  RoutedExperts " $R/model-fp8.txt | head -30
for gib in 64 0; do DEEPINFER_EXPERTS_FP8_COPY_GIB=$gib DEEPINFER_CUDA_FP8_ACT=1 timeout 90 $B/gpu_model_bench --model /dev/shm/flash4 --batches 1 --contexts 16 --prefill 4096 --served-prefill 4096,16384 --step-budgets 8192,16384 --steps 2 > $R/served-gib$gib.txt 2>&1; echo "served gib=$gib rc=$? ($SECONDS s)"; grep -iE "served|^prefill P" $R/served-gib$gib.txt | head -8; done
DEEPINFER_EXPERTS_FP8_COPY_GIB=64 DEEPINFER_CUDA_FP8_ACT=1 timeout 90 ncu --clock-control none --kernel-name regex:"ExpertGemmBlock128|PackItems|SwiGluBlock128" --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_bytes.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active --csv --page raw $B/gpu_model_bench --model /dev/shm/flash4 --batches 1 --contexts 16 --prefill 4096 --steps 1 > $R/ncu-block128.csv 2> $R/ncu.err; echo "ncu rc=$? ($SECONDS s)"
tar -cJf $OUT/o.tar.xz -C $OUT r

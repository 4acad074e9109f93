#!/usr/bin/env bash
# Session 24 run 207: the existing opt-ins of the few-token dense stream re-measured on today's chain
# (upload kernels, e4m3 experts, skinny kernel): fused quantisation (T <= 8), the TMA-fed kernel, the
# L2 head; interleaved rounds at B = 1, 2, 4, 8.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
$B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real >/dev/null 2>&1; echo "model ($SECONDS s)"
for r in 1 2 3; do for c in default FUSE_MAX_T=8 BULK=1 L2HEAD=2; do
  case $c in default) E="";; *) E="DEEPINFER_LINEAR_STREAM_$c";; esac
  env $E DEEPINFER_CUDA_FP8_ACT=1 timeout 40 $B/gpu_model_bench --model /dev/shm/flash4 --batches 1,2,4,8 --contexts 4096 --steps 16 > $R/ab-$c-$r.txt 2>&1; echo "$c rc=$? ($SECONDS s) $(grep -E '^decode|rror' $R/ab-$c-$r.txt | cut -c1-45 | sed 's/C=4096   step//' | tr -s ' ' | paste -sd' ')"
done; done
tar -cJf $OUT/o.tar.xz -C $OUT r

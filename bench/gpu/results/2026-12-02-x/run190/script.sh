#!/usr/bin/env bash
# Session 22 run 190: decode expert stream shapes above B=32 with the 128B weight loads: the default (w8pf4s4 above
# 9216 blocks) against w8pf4s8 and w16pf2s4 at B=64/128/256, interleaved twice.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
$B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real >/dev/null 2>&1; echo "model made ($SECONDS s)"
for v in d w8pf4s8 w16pf2s4 d w8pf4s8 w16pf2s4; do
  if [ $v = d ]; then unset DEEPINFER_EXPERTS_STREAM_VARIANT; else export DEEPINFER_EXPERTS_STREAM_VARIANT=$v; fi
  DEEPINFER_CUDA_FP8_ACT=1 timeout 100 $B/gpu_model_bench --model /dev/shm/flash4 --batches 64,128,256 --contexts 4096 --steps 8 > $R/grid-$v-$SECONDS.txt 2>&1; echo "grid $v rc=$? ($SECONDS s)"; grep -E "^decode" $(ls -t $R/grid-$v-*.txt | head -1) | cut -c1-45 | tr -s ' ' | paste -sd' '
done
tar -cJf $OUT/o.tar.xz -C $OUT r

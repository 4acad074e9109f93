#!/usr/bin/env bash
# Session 25 run 214: the attention reads the selected compressed entries in place (comp_bases; no
# GatherSelectedRows): tests (kernel level, model level bitwise against the gather), decode A/B, final grid.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
( $B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real >/dev/null 2>&1; echo done > /tmp/model-ready ) &
timeout 120 $B/cuda_backend_test --gtest_filter='*Attention*:*Attn*:*Paged*:*Model*:*Graph*:*Pdl*' > $R/tests.txt 2>&1; echo "cuda_backend_test subset rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure" $R/tests.txt | head -12
timeout 60 $B/cuda_goldens_test --gtest_filter='CudaModelPagedTest.*' > $R/tests-model.txt 2>&1; echo "model paged rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure" $R/tests-model.txt | head -8
while [ ! -f /tmp/model-ready ]; do sleep 1; done
export DEEPINFER_CUDA_FP8_ACT=1
ab() {  # ab NAME ENV... : one decode grid
  local n=$1; shift
  env "$@" timeout 60 $B/gpu_model_bench --model /dev/shm/flash4 --batches 1,8,32,128 --contexts 4096 --steps 6 --prefill 4096 > $R/ab-$n-$SECONDS.txt 2>&1
  echo "ab $n rc=$? ($SECONDS s) $(grep -E '^decode|rror' $(ls -t $R/ab-$n-*.txt | head -1) | cut -c1-45 | sed 's/C=4096   step//;s/decode //' | tr -s ' ' | paste -sd' ')"
}
for r in 1 2; do ab paged X=0; ab gather DEEPINFER_CUDA_PAGED_ATTENTION=0; done
timeout 150 $B/gpu_model_bench --model /dev/shm/flash4 --ceilings gpu-carry/ceilings-run213.json --batches 1,8,32,128,256 --contexts 4096 --breakdown 32:4096,128:4096 --prefill 4096,16384 --steps 8 --json $R/model-fp8.json > $R/model-fp8.txt 2>&1; echo "grid rc=$? ($SECONDS s)"; grep -E "^decode|^prefill P|GEMM part" $R/model-fp8.txt | cut -c1-110
tar -cJf $OUT/o.tar.xz -C $OUT r

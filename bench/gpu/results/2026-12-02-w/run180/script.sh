#!/usr/bin/env bash
# Session 21 run 180: the register expert GEMM with one scale per row (ExpertRowScaleMax, 256 shift
# tables, no per-stage row max / clamp / row-scale FMUL, scales loaded a stage ahead); interleaved
# wgmma issue (DEEPINFER_EXPERTS_RS_INTERLEAVE=1) against not. Tests, FP8 engine tests, prefill
# bench, ncu per kernel, SASS of the GEMM.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
export DEEPINFER_GOLDENS_DIR=$PWD/gpu-carry/goldens
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
( $B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real >/dev/null 2>&1; echo done > /tmp/model-ready ) &
timeout 150 $B/cuda_backend_test --gtest_filter='*MoeBlock128*:*Fp8Experts*:*RoutedExperts*' > $R/tests.txt 2>&1; trc=$?; echo "tests rc=$trc ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure|Expected|Which is|actual|relative" $R/tests.txt | head -30
[ $trc = 124 ] && { echo "tests timed out: skipping the rest"; tar -cJf $OUT/o.tar.xz -C $OUT r; exit 1; }
DEEPINFER_TEST_BACKEND=cuda DEEPINFER_CUDA_FP8_ACT=1 timeout 100 $B/engine_model_test --gtest_filter='*/0:-*Cli*:*EqualsGoldens*:*ParallelSamplesShareThePrompt*' > $R/engine-fp8.txt 2>&1; echo "engine fp8 rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $R/engine-fp8.txt | head -5
CUO=$(command -v cuobjdump || ls /usr/local/cuda*/bin/cuobjdump 2>/dev/null | head -1)
if [ -n "$CUO" ]; then $CUO -sass $B/gpu_model_bench 2>/dev/null | awk '/Function : .*ExpertGemmMxfp4KernelILi64/,/\.\.\.\.\.\.\.\.\.\./' > $R/sass-rs64.txt; echo "sass lines $(wc -l < $R/sass-rs64.txt)"; else echo "no cuobjdump"; fi
while [ ! -f /tmp/model-ready ]; do sleep 1; done
for il in 0 1 0 1; do
  DEEPINFER_EXPERTS_RS_INTERLEAVE=$il DEEPINFER_CUDA_FP8_ACT=1 timeout 60 $B/gpu_model_bench --model /dev/shm/flash4 --batches 1 --contexts 16 --prefill 4096,16384 --steps 1 > $R/model-il$il-$SECONDS.txt 2>&1; echo "model interleave=$il rc=$? ($SECONDS s)"; grep -E "^prefill P|^  RoutedExperts |GEMM part|rror" $(ls -t $R/model-il$il-*.txt | head -1) | tail -5
done
for il in 0 1; do
DEEPINFER_EXPERTS_RS_INTERLEAVE=$il DEEPINFER_CUDA_FP8_ACT=1 timeout 90 ncu --clock-control none --kernel-name regex:"ExpertGemmMxfp4|PackItems|SwiGluBlock128|RowScaleMax" --metrics gpu__time_duration.sum,dram__bytes_read.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum --csv --print-units base --page raw $B/gpu_model_bench --model /dev/shm/flash4 --batches 1 --contexts 16 --prefill 4096 --steps 1 > $R/ncu-il$il.csv 2> $R/ncu-il$il.err; echo "ncu interleave=$il rc=$? ($SECONDS s)"
python3 gpu-carry/ncu_agg.py $R/ncu-il$il.csv
done
tar -cJf $OUT/o.tar.xz -C $OUT r

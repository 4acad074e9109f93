#!/usr/bin/env bash
# Session 21 run 181: the register expert GEMM with cached row scales (backend ExpertTable), scale words brought by the
# producer with the stage, one mask per word (opaque prmt), descriptors by one add, WaitPhaseOrTrap without a clock read on
# a ready phase (static shift tables: 202 SASS instructions per stage, no spills). Full cuda_backend_test, FP8 engine tests; prefill 4k/8k/16k, items of 64 and 128; ncu.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
export DEEPINFER_GOLDENS_DIR=$PWD/gpu-carry/goldens
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
( $B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real >/dev/null 2>&1; echo done > /tmp/model-ready ) &
timeout 240 $B/cuda_backend_test > $R/tests.txt 2>&1; trc=$?; echo "tests rc=$trc ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure|Expected|Which is|actual|relative" $R/tests.txt | head -30
DEEPINFER_TEST_BACKEND=cuda DEEPINFER_CUDA_FP8_ACT=1 timeout 100 $B/engine_model_test --gtest_filter='*/0:-*Cli*:*EqualsGoldens*:*ParallelSamplesShareThePrompt*' > $R/engine-fp8.txt 2>&1; echo "engine fp8 rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $R/engine-fp8.txt | head -5
while [ ! -f /tmp/model-ready ]; do sleep 1; done
for ip in 64 128 64 128; do
  DEEPINFER_EXPERTS_BLOCK128_ITEM_PAIRS=$ip DEEPINFER_CUDA_FP8_ACT=1 timeout 60 $B/gpu_model_bench --model /dev/shm/flash4 --batches 1 --contexts 16 --prefill 4096,8192,16384 --steps 1 > $R/model-ip$ip-$SECONDS.txt 2>&1; echo "model items=$ip rc=$? ($SECONDS s)"; grep -E "^prefill P|^  RoutedExperts |GEMM part|rror" $(ls -t $R/model-ip$ip-*.txt | head -1) | head -12
done
DEEPINFER_CUDA_FP8_ACT=1 timeout 90 ncu --clock-control none --kernel-name regex:"ExpertGemmMxfp4|RowScaleMax" --metrics gpu__time_duration.sum,dram__bytes_read.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum --csv --print-units base --page raw $B/gpu_model_bench --model /dev/shm/flash4 --batches 1 --contexts 16 --prefill 4096 --steps 1 > $R/ncu.csv 2> $R/ncu.err; echo "ncu rc=$? ($SECONDS s)"
python3 gpu-carry/ncu_agg.py $R/ncu.csv
tar -cJf $OUT/o.tar.xz -C $OUT r

#!/usr/bin/env bash
# Session 20 run 176: the register path reading one 16-byte block per row and stage (PermutedStep):
# block-128 tests, FP8 engine tests; prefill items 64/128; ncu of the register GEMM.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64
export DEEPINFER_GOLDENS_DIR=$PWD/gpu-carry/goldens
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
( $B/make_bench_model --out /dev/shm/flash4 --layers-preset flash4 --scale real >/dev/null 2>&1; echo done > /tmp/model-ready ) &
timeout 150 $B/cuda_backend_test --gtest_filter='*MoeBlock128*:*Fp8Experts*' > $R/tests.txt 2>&1; trc=$?; echo "tests rc=$trc ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure|Expected|Which is|actual|relative" $R/tests.txt | head -30
[ $trc = 124 ] && { echo "tests timed out: skipping the rest"; tar -cJf $OUT/o.tar.xz -C $OUT r; exit 1; }
DEEPINFER_TEST_BACKEND=cuda DEEPINFER_CUDA_FP8_ACT=1 timeout 100 $B/engine_model_test --gtest_filter='*/0:-*Cli*:*EqualsGoldens*:*ParallelSamplesShareThePrompt*' > $R/engine-fp8.txt 2>&1; echo "engine fp8 rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $R/engine-fp8.txt | head -5
while [ ! -f /tmp/model-ready ]; do sleep 1; done
for ip in 64 64; do
  DEEPINFER_EXPERTS_BLOCK128_ITEM_PAIRS=$ip DEEPINFER_CUDA_FP8_ACT=1 timeout 60 $B/gpu_model_bench --model /dev/shm/flash4 --batches 1 --contexts 16 --prefill 4096,16384 --steps 1 > $R/model-ip$ip-$SECONDS.txt 2>&1; echo "model items=$ip rc=$? ($SECONDS s)"; grep -E "^prefill P|^  RoutedExperts |rror" $(ls -t $R/model-ip$ip-*.txt | head -1) | tail -4
done
DEEPINFER_CUDA_FP8_ACT=1 timeout 90 ncu --clock-control none --kernel-name regex:"ExpertGemmMxfp4|PackItems|SwiGluBlock128" --metrics gpu__time_duration.sum,dram__bytes_read.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active --csv --print-units base --page raw $B/gpu_model_bench --model /dev/shm/flash4 --batches 1 --contexts 16 --prefill 4096 --steps 1 > $R/ncu-rs.csv 2> $R/ncu.err; echo "ncu rc=$? ($SECONDS s)"
python3 - $R/ncu-rs.csv <<'PY'
import csv,sys,collections
rows=list(csv.reader(open(sys.argv[1])))
h=[i for i,r in enumerate(rows) if r and r[0]=="ID"]
if not h: print("no csv"); sys.exit()
hdr=rows[h[0]]; d=collections.defaultdict(list)
for r in rows[h[0]+2:]:
    if len(r)!=len(hdr): continue
    rr=dict(zip(hdr,r)); d[rr["Kernel Name"][:60]].append(rr)
for k,v in d.items():
    def m(c): 
        try: return sum(float(x[c].replace(",","")) for x in v)/len(v)
        except: return -1
    print(f"{k:60s} n={len(v)} us={m('gpu__time_duration.sum')/1000:.1f} GB={m('dram__bytes_read.sum')/1e9:.2f} issue={m('smsp__issue_active.avg.pct_of_peak_sustained_active'):.1f} tensor={m('sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active'):.1f}")
PY
tar -cJf $OUT/o.tar.xz -C $OUT r

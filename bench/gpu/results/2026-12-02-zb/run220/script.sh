#!/usr/bin/env bash
# Session 26 run 220: the cluster launch configuration shared by SplitsInOneWave and LaunchClusterSplit
# (ClusterSplitConfig, a read-through mend): the attention, cluster, graph and PDL suites.
cd "$(dirname "$0")/.."
rm -rf gpu-carry/bin; tar -xJf gpu-carry/bins.tar.xz -C gpu-carry
L=$(mktemp -d); tar -xJf gpu-carry/gpu-libs.tar.xz -C $L
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64 DEEPINFER_REQUIRE_GPU=1
B=gpu-carry/bin; R=$OUT/r; mkdir -p $R
timeout 200 $B/cuda_backend_test --gtest_filter='*Attention*:*Attn*:*Paged*:*Graph*:*Pdl*:*Cluster*' > $R/tests.txt 2>&1; echo "cuda_backend_test subset rc=$? ($SECONDS s)"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure" $R/tests.txt | head -12

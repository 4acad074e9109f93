#!/usr/bin/env bash
# Builds and runs the libFuzzer target for the safetensors header parser.
#
#   tools/fuzz/run-safetensors-fuzz.sh [SECONDS]    (default 600)
#
# Separate build dir (build-fuzz) with clang, ASan+UBSan+libFuzzer, only base;tensor;io.
# Single process (no -jobs/-workers): the dev machine has 2 shared cores. The corpus lives in
# build-fuzz/corpus (seeded from small golden safetensors files and writer outputs); the log
# ends with libFuzzer's "Done N runs in S second(s)" line, which gives the exec count.
set -euo pipefail
seconds="${1:-600}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${root}/build-fuzz"
shared="${root}/../shared"

CC=clang CXX=clang++ cmake -S "${root}" -B "${build}" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DDEEPINFER_CUDA=OFF -DDEEPINFER_FUZZ=ON -DDEEPINFER_BUILD_TESTS=OFF -DDEEPINFER_BUILD_BENCH=OFF \
  -DDEEPINFER_ONLY_MODULES="base;tensor;io" \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer" >/dev/null
cmake --build "${build}" -j2 --target safetensors_header_fuzz

corpus="${build}/corpus"
mkdir -p "${corpus}"
for f in "${shared}"/goldens/v41/*/engram_hash.safetensors; do
  [ -f "$f" ] && cp -f "$f" "${corpus}/$(basename "$(dirname "$f")")_engram_hash.safetensors"
done
# Seed: the first 4 KiB of a golden checkpoint (a truncated but well-formed prefix).
if [ -f "${shared}/goldens/v41/tiny_a/model.safetensors" ]; then
  head -c 4096 "${shared}/goldens/v41/tiny_a/model.safetensors" > "${corpus}/tiny_a_prefix.bin"
fi
printf '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"format":"pt"}}' \
  > "${corpus}/header.json"

cd "${build}"
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  ./bin/safetensors_header_fuzz -max_total_time="${seconds}" -max_len=16384 -timeout=10 \
  -rss_limit_mb=2048 -print_final_stats=1 -dict="${root}/tools/fuzz/safetensors.dict" \
  "${corpus}" 2>&1 | tee "${build}/fuzz.log" | grep -E "^#[0-9]+ +(pulse|NEW|REDUCE)|Done|ERROR|SUMMARY|stat::" | tail -40

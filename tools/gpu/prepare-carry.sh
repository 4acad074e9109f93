#!/usr/bin/env bash
# Packs what one GPU call needs into gpu-carry/ (git-ignored), under the device tool's 64 MiB
# transfer limit together with the tracked tree:
#   bins.tar.xz  stripped GPU test and bench binaries from BUILD/bin (unpack to gpu-carry/bin
#                there: tar -xJf gpu-carry/bins.tar.xz -C gpu-carry)
#   gpu-libs.tar.xz  the Debian shared libraries they need (tools/gpu/bundle-libs.sh)
#   goldens/tiny_a   one golden case (both do not fit next to the binaries)
#
#   tools/gpu/prepare-carry.sh [BUILD]      (default: build)
#
# Then, with carry ["gpu-carry", ".ref"] (.ref only for the reference stage):
#   tools/gpu/run-gpu-tests.sh --build gpu-carry --goldens gpu-carry/goldens --small
#   bench/gpu/run.sh --build gpu-carry --model /dev/shm/flash4 --stages ceilings,ours,summary
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
CARRY="$ROOT/gpu-carry"
BINS=(cuda_backend_test cuda_goldens_test engine_model_test gpu_model_bench make_bench_model
      gpu_ceilings gpu_fp8_block_gemm)
cmake --build "$BUILD" -j"$(nproc)" --target "${BINS[@]}"
rm -rf "$CARRY/bin" "$CARRY/bins.tar.xz" "$CARRY/gpu-libs.tar.xz"
mkdir -p "$CARRY/bin" "$CARRY/goldens"
for b in "${BINS[@]}"; do cp "$BUILD/bin/$b" "$CARRY/bin/"; done
strip "$CARRY"/bin/*
"$ROOT/tools/gpu/bundle-libs.sh" "$CARRY" >/dev/null
for g in "$ROOT/../shared/goldens/v41/tiny_a" "$ROOT/shared/goldens/v41/tiny_a"; do
  if [ -d "$g" ] && [ ! -d "$CARRY/goldens/tiny_a" ]; then cp -r "$g" "$CARRY/goldens/"; fi
done
# The libraries were found from the unpacked binaries; ship them packed.
tar -cJf "$CARRY/bins.tar.xz" -C "$CARRY" bin
rm -rf "$CARRY/bin"
tracked=$(git -C "$ROOT" ls-files -z | (cd "$ROOT" && xargs -0 du -cb 2>/dev/null) | tail -1 | cut -f1)
carry=$(du -sb "$CARRY" | cut -f1)
echo "gpu-carry: $((carry / 1048576)) MiB + tracked tree $((tracked / 1048576)) MiB (limit 64 MiB)"
[ $((carry + tracked)) -lt $((64 * 1048576)) ] || { echo "over the 64 MiB transfer limit" >&2; exit 1; }

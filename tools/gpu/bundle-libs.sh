#!/usr/bin/env bash
# Packs the shared libraries that the GPU binaries of a build need, other than glibc,
# libstdc++/libgcc and CUDA's own, into <build>/gpu-libs.tar.xz (about 15 MB), so that the
# build folder runs on a GPU machine whose distribution lacks them (e.g. Debian 12's
# libspdlog.so.1.10, libfmt.so.9, libicu*.so.72, libopenblas.so.0 on Ubuntu 24.04).
# run-gpu-tests.sh unpacks it onto LD_LIBRARY_PATH.
#
#   tools/gpu/bundle-libs.sh [BUILD_DIR]   (default <repo>/build)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
SKIP='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libnv)'
LIBS=()
for bin in "$BUILD"/bin/*cuda*_test "$BUILD"/bin/*gpu*_test "$BUILD"/bin/cuda_backend_bench "$BUILD"/bin/deepinfer \
    "$BUILD"/bin/make_bench_model "$BUILD"/bin/gpu_model_bench "$BUILD"/bin/gpu_ceilings; do
  [ -x "$bin" ] || continue
  while read -r name _ path _; do
    [[ "$name" =~ $SKIP ]] && continue
    [ -n "${path:-}" ] && [ -f "$path" ] && LIBS+=("$path")
  done < <(ldd "$bin" | grep '=>')
done
if [ "${#LIBS[@]}" -eq 0 ]; then echo "no libraries to bundle"; exit 0; fi
mapfile -t LIBS < <(printf '%s\n' "${LIBS[@]}" | sort -u)
printf '  %s\n' "${LIBS[@]}"
tar -cJhf "$BUILD/gpu-libs.tar.xz" --transform 's,.*/,,' "${LIBS[@]}" 2>/dev/null
ls -la "$BUILD/gpu-libs.tar.xz"

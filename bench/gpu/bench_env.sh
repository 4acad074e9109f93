# shellcheck shell=bash
# Set-up shared by the GPU-machine scripts run.sh and ablate.sh (sourced; defines functions only).
# A build folder is either a CMake build (bin/...) or tools/gpu/prepare-carry.sh's carry
# (bins.tar.xz, gpu-libs.tar.xz).

# Unpacks BUILD/bins.tar.xz into BUILD/bin unless BUILD/bin exists.
bench_unpack_bins() {
  local build=$1
  if [ ! -d "$build/bin" ] && [ -f "$build/bins.tar.xz" ]; then
    tar -xJf "$build/bins.tar.xz" -C "$build"
  fi
}

# Puts the carried Debian libraries (BUILD/gpu-libs.tar.xz, unpacked into a temporary folder)
# and the CUDA library folders on LD_LIBRARY_PATH.
bench_library_path() {
  local build=$1 libdir d
  if [ -f "$build/gpu-libs.tar.xz" ]; then
    libdir=$(mktemp -d)
    tar -xJf "$build/gpu-libs.tar.xz" -C "$libdir" &&
      export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
  done
  return 0
}

# Whether MODEL holds a complete generated checkpoint (bench_ensure_model's mark).
bench_model_complete() { [ -f "$1/model.safetensors.index.json" ]; }

# Generates the flash4 bench checkpoint (real shapes) at MODEL with BIN/make_bench_model unless
# it is complete: make_bench_model writes config.json first and model.safetensors.index.json
# last, so the index is the mark. An interrupted generation (config.json, no index) is removed
# and redone; any other non-empty folder without the index is refused (make_bench_model does
# not write into one). Returns make_bench_model's status.
bench_ensure_model() {
  local bin=$1 model=$2
  bench_model_complete "$model" && return 0
  if [ -f "$model/config.json" ]; then
    echo "bench_ensure_model: $model is an interrupted generation (no index): redoing it" >&2
    rm -rf "$model"
  fi
  "$bin/make_bench_model" --out "$model" --layers-preset flash4 --scale real --threads "$(nproc)"
}

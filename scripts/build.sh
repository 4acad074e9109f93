#!/usr/bin/env bash
# The standard build: Release, Ninja, every executable in build/bin/.
# Extra arguments go to the configure step (e.g. -DDEEPINFER_CUDA=OFF).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${DEEPINFER_BUILD_DIR:-build}"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$BUILD_DIR"

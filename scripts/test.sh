#!/usr/bin/env bash
# Sets up everything (Debian packages, Python test venv), builds, and runs every CPU test.
# This is the README's test command and what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/setup-venv.sh
scripts/check-format.sh
scripts/build.sh
BUILD_DIR="${DEEPINFER_BUILD_DIR:-build}"
JOBS="${DEEPINFER_TEST_JOBS:-$(nproc)}"
# GPU tests are labelled "gpu" and run on the GPU machine (tools/gpu/run-gpu-tests.sh).
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS" -LE gpu --timeout 900

#!/usr/bin/env bash
# Runs every GPU test of an existing build on a CUDA machine; builds nothing.
#
#   tools/gpu/run-gpu-tests.sh [--build DIR] [--goldens DIR] [--sanitize] [--small] [--bench]
#
#   --build DIR    build folder holding bin/ (default: <repo>/build)
#   --goldens DIR  golden cases for `deepinfer check-goldens --backend cuda`
#                  (default: <repo>/../shared/goldens/v41, else <repo>/shared/goldens/v41)
#   --sanitize     also run compute-sanitizer memcheck and racecheck on cuda_backend_test
#                  (real-size cases skipped there: DEEPINFER_CUDA_TEST_SMALL=1)
#   --small        skip the real-V4.1-size test cases everywhere
#   --bench        also run bin/cuda_backend_bench (device times; not counted as tests)
#
# Steps: find a CUDA device (none = failure), unpack <build>/gpu-libs.tar.xz if present
# (tools/gpu/bundle-libs.sh makes it) onto LD_LIBRARY_PATH, run every GPU gtest binary
# (bin/*cuda*_test, bin/*gpu*_test: the kernel tests and cuda_goldens_test, the model on
# the GPU against the goldens) with DEEPINFER_REQUIRE_GPU=1 so that a skip is a failure,
# run `deepinfer check-goldens --backend cuda` if the CLI has that flag, optionally the
# sanitizers. Every gtest test, golden
# case and sanitizer run counts once. Logs go to <build>/gpu-test-logs/ (and $OUT if set).
# The last line is "N passed, M failed"; the exit status is 0 only if M is 0.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD="$ROOT/build"
GOLDENS=""
SANITIZE=0
BENCH=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$(cd "$2" && pwd); shift 2 ;;
    --goldens) GOLDENS="$2"; shift 2 ;;
    --sanitize) SANITIZE=1; shift ;;
    --bench) BENCH=1; shift ;;
    --small) export DEEPINFER_CUDA_TEST_SMALL=1; shift ;;
    -h|--help) sed -n 2,20p "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
if [ -z "$GOLDENS" ]; then
  for g in "$ROOT/../shared/goldens/v41" "$ROOT/shared/goldens/v41"; do
    if [ -d "$g" ]; then GOLDENS=$(cd "$g" && pwd); break; fi
  done
fi

LOGS="$BUILD/gpu-test-logs"
mkdir -p "$LOGS"
PASSED=0
FAILED=0
FAILURES=()
pass() { PASSED=$((PASSED + 1)); }
fail() { FAILED=$((FAILED + 1)); FAILURES+=("$1"); echo "FAIL: $1"; }

summary() {
  if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then cp -r "$LOGS" "$OUT/" 2>/dev/null || true; fi
  echo
  echo "================ GPU test summary ================"
  for f in "${FAILURES[@]+"${FAILURES[@]}"}"; do echo "  FAILED: $f"; done
  echo "logs: $LOGS"
  echo "$PASSED passed, $FAILED failed"
  [ "$FAILED" -eq 0 ]
  exit $?
}

# --- shared libraries -----------------------------------------------------------------
# tools/gpu/prepare-carry.sh ships the binaries packed.
if [ ! -d "$BUILD/bin" ] && [ -f "$BUILD/bins.tar.xz" ]; then
  tar -xJf "$BUILD/bins.tar.xz" -C "$BUILD" || { echo "cannot unpack $BUILD/bins.tar.xz" >&2; exit 1; }
fi
if [ -f "$BUILD/gpu-libs.tar.xz" ]; then
  LIBDIR=$(mktemp -d)
  tar -xJf "$BUILD/gpu-libs.tar.xz" -C "$LIBDIR" && \
    export LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
done
# cuBLAS from the Python wheels (nvidia-cublas), if the toolkit's is missing.
PYLIB=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null || true)
[ -n "$PYLIB" ] && [ -d "$PYLIB" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$PYLIB"

# --- device -----------------------------------------------------------------------------
echo "== device"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  fail "no CUDA device found (nvidia-smi -L lists no GPU)"
  summary
fi
nvidia-smi -L
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader || true
export DEEPINFER_REQUIRE_GPU=1
[ -n "$GOLDENS" ] && export DEEPINFER_GOLDENS_DIR="$GOLDENS"  # for cuda_goldens_test

missing_libs() { ldd "$1" 2>/dev/null | grep 'not found' | awk '{print $1}' | tr '\n' ' '; }

# Runs one gtest binary; counts each test. Extra args go to the binary.
run_gtest() {
  local label="$1" bin="$2"; shift 2
  local log="$LOGS/$label.log" missing
  missing=$(missing_libs "$bin")
  if [ -n "$missing" ]; then
    fail "$label: shared libraries not found: $missing(run tools/gpu/bundle-libs.sh on the build machine)"
    return
  fi
  echo "== $label"
  local start=$SECONDS
  timeout 1200 "$@" "$bin" --gtest_color=no >"$log" 2>&1
  local rc=$?
  local ok bad skipped
  ok=$(grep -c '^\[       OK \] ' "$log")
  mapfile -t bad < <(grep -E '^\[  FAILED  \] .+ \([0-9]+ ms\)$' "$log" | sed -E 's/^\[  FAILED  \] //; s/ \([0-9]+ ms\)$//')
  mapfile -t skipped < <(grep -E '^\[  SKIPPED \] .+ \([0-9]+ ms\)$' "$log" | sed -E 's/^\[  SKIPPED \] //; s/ \([0-9]+ ms\)$//')
  PASSED=$((PASSED + ok))
  for t in "${bad[@]+"${bad[@]}"}"; do fail "$label: $t"; done
  for t in "${skipped[@]+"${skipped[@]}"}"; do fail "$label: $t was skipped on a GPU machine"; done
  if [ "$rc" -ne 0 ] && [ "${#bad[@]}" -eq 0 ]; then
    fail "$label: exit status $rc with no failed test reported (crash, timeout or sanitizer error)"
  fi
  echo "   $ok passed, ${#bad[@]} failed, ${#skipped[@]} skipped, exit $rc, $((SECONDS - start)) s"
  if [ "$rc" -ne 0 ]; then  # show why: failure messages (with seeds) or the log tail
    grep -E -B3 -A15 'Failure$|error:|ERROR|SUMMARY|Saved|Invalid|Race' "$log" | head -150 || true
    tail -20 "$log"
  fi
}

# --- gtest binaries ---------------------------------------------------------------------
FOUND=0
for bin in "$BUILD"/bin/*cuda*_test "$BUILD"/bin/*gpu*_test; do
  [ -x "$bin" ] || continue
  FOUND=1
  run_gtest "$(basename "$bin")" "$bin"
done
[ "$FOUND" -eq 1 ] || fail "no GPU test binaries (bin/*cuda*_test) in $BUILD/bin"

# The engine end to end on the GPU (DEEPINFER_TEST_BACKEND=cuda): the goldens' greedy
# continuations through the real scheduler, batching, chunked prefill, preemption and n>1.
# Excluded: bitwise batch invariance, a CPU guarantee only for now (on the GPU the decode GEMV
# and the prefill SGEMM sum in different orders), and the CLI test (build-machine paths).
if [ -x "$BUILD/bin/engine_model_test" ]; then
  run_gtest engine_model_test-cuda "$BUILD/bin/engine_model_test" env DEEPINFER_TEST_BACKEND=cuda \
    GTEST_FILTER='-*Cli*:*BatchAndChunkingInvarianceBitwise*'
fi
# If the end-to-end goldens failed, rerun them once synchronising after every op, so that an
# asynchronous CUDA error is attributed to its op (informative, not counted).
if printf '%s\n' "${FAILURES[@]+"${FAILURES[@]}"}" | grep -q '^cuda_goldens_test'; then
  echo "== cuda_goldens_test again with DEEPINFER_CUDA_SYNC=1 (not counted)"
  DEEPINFER_CUDA_SYNC=1 timeout 1200 "$BUILD/bin/cuda_goldens_test" --gtest_color=no \
    >"$LOGS/cuda_goldens_test-sync.log" 2>&1
  grep -E 'Failure|error|FAIL|golden' "$LOGS/cuda_goldens_test-sync.log" | head -40
fi

# --- goldens on the GPU -----------------------------------------------------------------
DEEPINFER="$BUILD/bin/deepinfer"
echo "== check-goldens --backend cuda"
if [ ! -x "$DEEPINFER" ]; then
  fail "check-goldens: $DEEPINFER not built"
elif ! "$DEEPINFER" check-goldens --help 2>&1 | grep -q -- '--backend'; then
  fail "check-goldens: this deepinfer has no --backend flag (GPU goldens not run)"
elif [ -z "$GOLDENS" ] || ! ls -d "$GOLDENS"/*/ >/dev/null 2>&1; then
  fail "check-goldens: no golden cases found (pass --goldens DIR)"
else
  for case_dir in "$GOLDENS"/*/; do
    [ -f "$case_dir/config.json" ] || continue
    name=$(basename "$case_dir")
    log="$LOGS/check-goldens-$name.log"
    if timeout 1200 "$DEEPINFER" check-goldens --backend cuda "$case_dir" >"$log" 2>&1; then
      pass
      tail -1 "$log"
    else
      fail "check-goldens --backend cuda $name"
      grep -E 'FAIL|error' "$log" | head -30
      tail -5 "$log"
    fi
  done
fi

# --- compute-sanitizer ------------------------------------------------------------------
if [ "$SANITIZE" -eq 1 ]; then
  SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
  KERNEL_TEST="$BUILD/bin/cuda_backend_test"
  if [ -z "$SANITIZER" ]; then
    fail "compute-sanitizer not found"
  elif [ ! -x "$KERNEL_TEST" ]; then
    fail "sanitizer: $KERNEL_TEST not built"
  else
    for tool in memcheck racecheck; do
      echo "== compute-sanitizer --tool $tool"
      log="$LOGS/sanitizer-$tool.log"
      if DEEPINFER_CUDA_TEST_SMALL=1 timeout 1800 "$SANITIZER" --tool "$tool" --error-exitcode 99 \
          "$KERNEL_TEST" --gtest_color=no >"$log" 2>&1; then
        pass
        grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -2
      else
        fail "compute-sanitizer $tool on cuda_backend_test (see $log)"
        grep -E -A8 '^========= (Invalid|Error|Race|Program hit)|SUMMARY' "$log" | head -60
      fi
    done
  fi
fi

# --- benchmarks (informative) -------------------------------------------------------------
if [ "$BENCH" -eq 1 ]; then
  if [ -x "$BUILD/bin/cuda_backend_bench" ]; then
    echo "== cuda_backend_bench"
    timeout 600 "$BUILD/bin/cuda_backend_bench" --benchmark_min_time=0.2 \
      --benchmark_out="$LOGS/cuda_backend_bench.json" 2>&1 | tee "$LOGS/cuda_backend_bench.log" |
      grep -E '^(BM_|---|Benchmark)' || true
  else
    echo "== cuda_backend_bench not built (configure with -DDEEPINFER_BUILD_BENCH=ON)"
  fi
fi

summary

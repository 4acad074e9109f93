#!/usr/bin/env bash
# Self-test of ablate.sh with a stub gpu_model_bench (no GPU): the stub's step time depends on
# DEEPINFER_CUDA_SKIP_KERNELS and on the round, so the table must show the medians and the
# differences from the base runs, and a group whose runs print nothing must read "failed". The
# model folder starts as an interrupted generation (config.json, no index), so it must be
# removed and the stub make_bench_model run once.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP/build/bin" "$TMP/model"
echo '{}' > "$TMP/model/config.json"  # an interrupted generation: config.json, no index
cat > "$TMP/build/bin/gpu_model_bench" <<'STUB'
#!/usr/bin/env bash
# Prints decode lines like gpu_model_bench: base 1.50 / 3.00 ms plus 0.02 x (call number mod 3),
# streams 0.30 / 0.50 ms less, "Fail" patterns print an error only.
skip=${DEEPINFER_CUDA_SKIP_KERNELS:-}
[[ "$skip" == *Fail* ]] && { echo "failed: INTERNAL: stub"; exit 1; }
[ "${DEEPINFER_CUDA_FP8_ACT:-}" = 1 ] || { echo "fp8 mode not set"; exit 1; }
count_file="$(dirname "$0")/calls"
n=$(( $(cat "$count_file" 2>/dev/null || echo 0) + 1 )); echo $n > "$count_file"
jitter=$(( n % 3 * 2 ))
b1=150; b8=300
if [[ "$skip" == *LinearStream* ]]; then b1=$((b1 - 30)); b8=$((b8 - 50)); fi
printf 'decode B=1    C=4096   step     %d.%02d ms      1 tok/s\n' $(( (b1 + jitter) / 100 )) $(( (b1 + jitter) % 100 ))
printf '  timed steps: 8 graph launches\n'
printf 'decode B=8    C=4096   step     %d.%02d ms      1 tok/s\n' $(( (b8 + jitter) / 100 )) $(( (b8 + jitter) % 100 ))
STUB
chmod +x "$TMP/build/bin/gpu_model_bench"
cat > "$TMP/build/bin/make_bench_model" <<'STUB'
#!/usr/bin/env bash
# Like make_bench_model: refuses a non-empty OUT (--out OUT), writes config.json first and the
# index last; counts its calls next to itself.
while [ $# -gt 0 ]; do [ "$1" = --out ] && out=$2; shift; done
[ -d "$out" ] && [ -n "$(ls -A "$out")" ] && { echo "$out exists and is not empty"; exit 1; }
mkdir -p "$out" && echo '{}' > "$out/config.json" && echo '{}' > "$out/model.safetensors.index.json"
echo x >> "$(dirname "$0")/model-calls"
STUB
chmod +x "$TMP/build/bin/make_bench_model"
"$HERE/ablate.sh" --build "$TMP/build" --model "$TMP/model" --out "$TMP/out" --batches 1,8 \
  --repeats 3 --groups "streams=LinearStreamKernel;broken=Fail" > "$TMP/log" 2>&1
table="$TMP/out/ablation.md"
fail() { echo "ablate_test: $1"; cat "$TMP/log"; exit 1; }
grep -qF '| skipped | B=1 step ms (vs base) | B=8 step ms (vs base) |' "$table" || fail "header"
# Calls in order base, streams, broken (x3); broken stops before counting, so base gets calls
# 1, 3, 5 (+0.02, +0, +0.04: median 1.52 / 3.02) and streams 2, 4, 6 (+0.04, +0.02, +0:
# median 1.22 / 2.52).
grep -qF '| base | 1.52 | 3.02 |' "$table" || fail "base row"
grep -qF '| streams | 1.22 (-0.30) | 2.52 (-0.50) |' "$table" || fail "streams row"
grep -qF '| broken | failed | failed |' "$table" || fail "failed row"
grep -q 'broken (round 3): failed, see ab-broken-3.txt' "$TMP/log" || fail "progress line"
[ -f "$TMP/model/model.safetensors.index.json" ] &&
  [ "$(wc -l < "$TMP/build/bin/model-calls")" = 1 ] ||
  fail "the interrupted checkpoint was not redone exactly once"
echo "ablate_test: ok"

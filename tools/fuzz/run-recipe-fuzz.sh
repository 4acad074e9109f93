#!/usr/bin/env bash
# Builds and runs the recipe libFuzzer targets (chat, responses, messages request parsers and
# the output state machine), one after another, each for SECONDS (default 600).
#
#   tools/fuzz/run-recipe-fuzz.sh [SECONDS] [TARGET...]    (targets: chat responses messages output)
#
# Separate build dir (build-recipe-fuzz) with clang, ASan+UBSan+libFuzzer, only
# base;tokenizer;recipe. Request corpora are seeded from ../shared/recipe/corpus.jsonl bodies
# of each protocol; the output corpus from the stream cases' chunks. Each log ends with
# libFuzzer's "Done N runs in S second(s)" line (the exec count).
set -euo pipefail
seconds="${1:-600}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(chat responses messages output)
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${root}/build-recipe-fuzz"
shared="${root}/../shared"

CC=clang CXX=clang++ cmake -S "${root}" -B "${build}" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DDEEPINFER_CUDA=OFF -DDEEPINFER_FUZZ=ON -DDEEPINFER_BUILD_TESTS=OFF -DDEEPINFER_BUILD_BENCH=OFF \
  -DDEEPINFER_ONLY_MODULES="base;tokenizer;recipe" >/dev/null
cmake --build "${build}" -j2 --target $(printf 'recipe_fuzz_%s ' "${targets[@]}")

python3 - "${shared}/recipe/corpus.jsonl" "${build}/corpus" <<'PY'
import json, os, sys
src, out = sys.argv[1], sys.argv[2]
names = {"chat_completions": "chat", "responses": "responses", "messages": "messages"}
for d in list(names.values()) + ["output"]:
    os.makedirs(os.path.join(out, d), exist_ok=True)
if os.path.exists(src):
    for i, line in enumerate(open(src, encoding="utf-8")):
        case = json.loads(line)
        proto = names.get(case.get("protocol", ""))
        if proto and "body" in case:
            with open(os.path.join(out, proto, f"case{i}.json"), "w") as f:
                json.dump(case["body"], f)
        text = "".join(c.get("text", "") for c in case.get("chunks", []) if isinstance(c, dict))
        if text:
            with open(os.path.join(out, "output", f"case{i}.txt"), "w") as f:
                f.write(text)
PY

for target in "${targets[@]}"; do
  log="${build}/fuzz-${target}.log"
  echo "== recipe_fuzz_${target} for ${seconds} s"
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "${build}/bin/recipe_fuzz_${target}" -max_total_time="${seconds}" -max_len=16384 -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 "${build}/corpus/${target}" >"${log}" 2>&1 || {
      echo "recipe_fuzz_${target}: FAILED (see ${log})"; tail -30 "${log}"; exit 1; }
  grep -E "Done [0-9]+ runs|stat::number_of_executed_units" "${log}" | tail -2
done

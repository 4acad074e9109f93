#!/usr/bin/env bash
# Sets everything up, builds, and runs the main job: `deepinfer serve` (OpenAI + Anthropic
# compatible HTTP API on 127.0.0.1:8000). With no --model it serves the embedded demo model
# (random weights, generated into ~/.cache/deepinfer on first use). Arguments go to
# `deepinfer serve`, e.g.  scripts/run.sh --model /path/to/DeepSeek-V4.1-Flash --port 8080
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
exec build/bin/deepinfer serve "$@"

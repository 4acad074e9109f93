#!/usr/bin/env bash
# Sets everything up, builds, and runs the main job. Arguments are passed to the command,
# e.g. scripts/run.sh --model /path/to/DeepSeek-V4.1-Flash
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
exec build/bin/deepinfer version "$@"

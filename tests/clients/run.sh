#!/usr/bin/env bash
# CTest entry of the SDK tests: run.sh /path/to/deepinfer
# Skips (exit 77) only when the virtual environment is missing (scripts/setup-venv.sh makes it)
# or the CLI was built without the serve command (DEEPINFER_ONLY_MODULES).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
python="$root/.venv/bin/python"
if [ ! -x "$python" ]; then
  echo "SKIP: $python is missing (run scripts/setup-venv.sh)"
  exit 77
fi
if ! "$1" serve --help > /dev/null 2>&1; then
  echo "SKIP: $1 has no serve command"
  exit 77
fi
exec "$python" "$root/tests/clients/run_all.py" "$1"

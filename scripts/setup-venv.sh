#!/usr/bin/env bash
# Creates .venv with the Python tools the tests use (official API SDKs, HF tokenizers for
# reference data). Idempotent: re-runs only when requirements change.
set -euo pipefail
cd "$(dirname "$0")/.."
REQ=tools/requirements-test.txt
VENV=.venv
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
STAMP="$VENV/.requirements.sha256"
want=$(sha256sum "$REQ" | cut -d' ' -f1)
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$want" ]; then
  "$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQ"
  echo "$want" > "$STAMP"
fi

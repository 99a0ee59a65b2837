#!/usr/bin/env bash
# Creates ./.venv with the test tools (moto server, cfn-lint, SAM CLI) if missing or outdated.
# Idempotent: a second run with unchanged requirements does nothing.
# Usage: infra/venv.sh [requirements file ...]   (default: infra/requirements.txt)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv
[ $# -gt 0 ] || set -- infra/requirements.txt
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
for req in "$@"; do
  stamp="$venv/.installed-$(basename "$req")"
  if [ ! -f "$stamp" ] || ! cmp -s "$req" "$stamp"; then
    "$venv/bin/pip" install --disable-pip-version-check -q -r "$req"
    cp "$req" "$stamp"
  fi
done

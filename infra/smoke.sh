#!/usr/bin/env bash
# Post-deploy smoke test (docs/operations.md, "After a deploy"): infra/smoke.py on the
# project's venv (boto3 for a stack's outputs, cryptography for the receiver).
#   infra/smoke.sh STACK                 a deployed stack (SMOKE_PUBLIC_URL or --no-webhook)
#   infra/smoke.sh --url URL --token T   any running service
#   infra/smoke.sh --standalone [BIN]    the standalone on a temporary data directory
set -euo pipefail
cd "$(dirname "$0")/.."
infra/venv.sh >/dev/null
exec .venv/bin/python infra/smoke.py "$@"

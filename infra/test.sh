#!/usr/bin/env bash
# The project's test command (README): builds the workspace once and runs every test suite.
# Idempotent; needs only the Rust toolchain.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --all-targets --locked "$@"

#!/usr/bin/env bash
# Browser tests of the web console (docs/console.md). Idempotent on a fresh machine:
#  1. installs Debian's chromium with apt if /usr/bin/chromium is missing (root or sudo)
#  2. installs playwright-core and uplot from package-lock.json (npm ci; no browser download)
#  3. builds the standalone binary (debug, the target dir cargo test already filled)
#  4. runs console.test.mjs with node's test runner, bounded in time (CONSOLE_TIMEOUT, s)
# Screenshots are written to docs/console/.
set -euo pipefail
cd "$(dirname "$0")"

if [ ! -x /usr/bin/chromium ]; then
  echo "== installing chromium (apt)"
  sudo_=""
  [ "$(id -u)" -eq 0 ] || sudo_="sudo"
  $sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq chromium > /dev/null
fi
if ! command -v npm > /dev/null; then
  echo "== installing nodejs and npm (apt)"
  sudo_=""
  [ "$(id -u)" -eq 0 ] || sudo_="sudo"
  $sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq nodejs npm > /dev/null
fi
if ! cmp -s package-lock.json node_modules/.package-lock.json 2>/dev/null; then
  npm ci --no-audit --no-fund --loglevel=error
fi
(cd ../.. && cargo build -p standalone --locked --quiet)

echo "== console browser tests (headless chromium)"
timeout "${CONSOLE_TIMEOUT:-600}" node --test --test-concurrency=1 console.test.mjs

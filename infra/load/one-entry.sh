#!/usr/bin/env bash
# One-entry requests against the release standalone (issue 12, item 1), in one run of one
# binary: GET /health at full speed, POST .../entries with one itemSale per request at full
# speed (wrk, infra/load/wrk/one-entry.lua), then the entries at half that rate, open loop
# (`load --rate`: latency counted from each request's scheduled time), for the p99.
# Prints the machine's load average, the three results, the ratio entries/health, and the
# server's CPU time per request in each full-speed phase (from /proc: utime + stime), which
# other load on the machine disturbs much less than the rates, and the server's context
# switches per request (every thread's, from /proc/PID/task/*/status).
#
#   infra/load/one-entry.sh                 # builds (release), then measures; ~35 s
#   BIN=/path/to/standalone infra/load/one-entry.sh   # another build of the service
#   CONNECTIONS=8 THREADS=2 SECONDS_EACH=10 PORT=18091 (defaults)
#   RATES="1000 3500" infra/load/one-entry.sh   # also these fixed rates, open loop, after
#   LATENCIES=DIR     # write each open-loop run's per-request latencies to DIR/rate-R.txt
#                     # (scheduled ms, latency ms: `load --latencies`), to see when the
#                     # slow ones were sent
#
# Installs wrk (Debian package `wrk`) with apt when it is missing (root or sudo). The
# server, wrk and the open-loop sender share the machine's cores: compare numbers from one
# run, and note the load average it prints.
set -euo pipefail
cd "$(dirname "$0")/../.."
CONNECTIONS=${CONNECTIONS:-8}
THREADS=${THREADS:-2}
SECONDS_EACH=${SECONDS_EACH:-10}
PORT=${PORT:-18091}
if ! command -v wrk >/dev/null; then
    echo "== installing wrk (apt)"
    sudo_=""
    [ "$(id -u)" -eq 0 ] || sudo_="sudo"
    $sudo_ apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq wrk >/dev/null
fi
if [ -z "${BIN:-}" ]; then
    cargo build --release -q -p standalone -p load
    BIN=target/release/standalone
fi
LOAD=${LOAD:-target/release/load}
[ -x "$LOAD" ] || cargo build --release -q -p load
DATA=$(mktemp -d)
SERVER=
cleanup() {
    if [ -n "$SERVER" ]; then kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; fi
    rm -rf "$DATA"
}
trap cleanup EXIT
"$BIN" serve --listen "127.0.0.1:$PORT" --data "$DATA" --rate-limit 1000000 --rate-burst 1000000 \
    >"$DATA/server.log" 2>&1 &
SERVER=$!
for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
    sleep 0.1
done
TOKEN=$("$BIN" token --data "$DATA" --tenant load | tail -n 1)
export TOKEN
eval "$("$LOAD" --url "http://127.0.0.1:$PORT" --setup-only)"
export ENTRIES_URL_PATH RUN="wrk-$$"
URL="http://127.0.0.1:$PORT"

echo "== $(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null || true), $(nproc) cores, load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
# The server's CPU time so far, in clock ticks (utime + stime of /proc/PID/stat).
cpu_ticks() { awk '{print $14 + $15}' "/proc/$SERVER/stat"; }
# Context switches of all the server's threads so far (voluntary + involuntary), as the
# threads alive now count them (the runtime's threads live as long as the server).
switches() {
    cat /proc/"$SERVER"/task/*/status 2>/dev/null |
        awk '/^(non)?voluntary_ctxt_switches/ {n += $2} END {print n}'
}
# Microseconds of server CPU per request: ticks used, requests answered (wrk's count).
per_request() {
    awk -v t="$1" -v hz="$(getconf CLK_TCK)" -v n="$2" 'BEGIN {printf "%.0f us", t * 1e6 / hz / n}'
}
echo "== GET /health: wrk -t$THREADS -c$CONNECTIONS -d${SECONDS_EACH}s --latency"
c0=$(cpu_ticks)
s0=$(switches)
health=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"${SECONDS_EACH}s" --latency "$URL/health")
c1=$(cpu_ticks)
s1=$(switches)
echo "$health" | grep -E "requests in|Requests/sec|Latency  |99%|Non-2xx|Socket errors" || true
echo "== POST entries, one itemSale each: wrk -t$THREADS -c$CONNECTIONS -d${SECONDS_EACH}s --latency -s infra/load/wrk/one-entry.lua"
entries=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"${SECONDS_EACH}s" --latency \
    -s infra/load/wrk/one-entry.lua "$URL")
c2=$(cpu_ticks)
s2=$(switches)
echo "$entries" | grep -E "requests in|Requests/sec|Latency  |99%|Non-2xx|Socket errors" || true
if echo "$entries" | grep -q "Non-2xx"; then
    echo "some entries requests failed; server log: $DATA/server.log" >&2
    tail -n 5 "$DATA/server.log" >&2
    exit 1
fi
h=$(echo "$health" | awk '/Requests\/sec/ {print $2}')
e=$(echo "$entries" | awk '/Requests\/sec/ {print $2}')
echo "entries/health = $(awk -v e="$e" -v h="$h" 'BEGIN {printf "%.1f %%", 100 * e / h}')"
hn=$(echo "$health" | awk '/requests in/ {print $1}')
en=$(echo "$entries" | awk '/requests in/ {print $1}')
echo "server CPU per request: /health $(per_request $((c1 - c0)) "$hn"), entries $(per_request $((c2 - c1)) "$en")"
echo "server context switches per request: $(awk -v h=$((s1 - s0)) -v hn="$hn" -v e=$((s2 - s1)) -v en="$en" \
    'BEGIN {printf "/health %.2f, entries %.2f", h / hn, e / en}')"
half=$(awk -v e="$e" 'BEGIN {printf "%d", e / 2}')
echo "== POST entries at half that rate ($half/s), open loop: load --batch 1 --rate $half --duration $SECONDS_EACH"
open_loop() {
    local extra=()
    if [ -n "${LATENCIES:-}" ]; then mkdir -p "$LATENCIES"; extra=(--latencies "$LATENCIES/rate-$1.txt"); fi
    "$LOAD" --url "$URL" --batch 1 --rate "$1" --duration "$SECONDS_EACH" "${extra[@]}" | tail -n 1
}
open_loop "$half"
for rate in ${RATES:-}; do
    echo "== POST entries at $rate/s, open loop: load --batch 1 --rate $rate --duration $SECONDS_EACH"
    open_loop "$rate"
done
echo "== load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

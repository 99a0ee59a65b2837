#!/usr/bin/env python3
"""Memory and latency of large JSON bodies (docs/performance.md, "Request bodies held as JSON").

Sends N bodies of many small JSON objects at once (each under the 5 MiB limit) to a running
standalone, while it polls /health every 50 ms and samples the server's VmRSS every 10 ms;
prints the peak RSS, the worst /health latency and how long the N requests took.

    BIN=target/release/standalone; D=$(mktemp -d)
    $BIN token --data $D --tenant acme > $D/token
    $BIN serve --listen 127.0.0.1:18850 --data $D --metrics-listen off & sleep 1
    .venv/bin/python infra/load/body_memory.py http://127.0.0.1:18850 $D/token $! 6
"""
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import requests

BASE, TOKEN_FILE, PID = sys.argv[1], sys.argv[2], sys.argv[3]
N = int(sys.argv[4]) if len(sys.argv) > 4 else 6
TOKEN = open(TOKEN_FILE).read().strip()
HEADERS = {"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json"}


def rss_mb():
    for line in open(f"/proc/{PID}/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) // 1024
    return 0


session = requests.Session()
session.post(BASE + "/projects", json={"projectId": "bodies"}, headers=HEADERS)
session.post(BASE + "/projects/bodies/instances", json={"instanceId": "b"}, headers=HEADERS)
small = '{"a":[1,2,3,{"b":"xxxxxxxx"}]}'
entry = '{"type":"itemSale","data":{"itemId":"x","price":1,"junk":[' + ",".join(['{"b":[1]}'] * 500) + "]}}"
BODIES = {
    "calculatePrices metadata, 150,000 small objects (refused: metadata over 8 KiB)": (
        "/projects/bodies/calculatePrices",
        '{"metadata":[' + ",".join([small] * 150_000) + "]}",
    ),
    "entries, 1,000 with 500 small objects each in data (accepted)": (
        "/projects/bodies/instances/b/entries",
        '{"entries":[' + ",".join([entry] * 1000) + "]}",
    ),
}

for label, (path, body) in BODIES.items():
    stop, peak, latencies = [False], [0], []

    def monitor():
        while not stop[0]:
            peak[0] = max(peak[0], rss_mb())
            time.sleep(0.01)

    def health():
        s = requests.Session()
        while not stop[0]:
            t = time.time()
            s.get(BASE + "/health")
            latencies.append(time.time() - t)
            time.sleep(0.05)

    threads = [threading.Thread(target=monitor), threading.Thread(target=health)]
    for t in threads:
        t.start()
    before = rss_mb()
    time.sleep(0.2)
    started = time.time()
    with ThreadPoolExecutor(N) as pool:
        statuses = list(
            pool.map(
                lambda _: requests.post(BASE + path, data=body, headers=HEADERS, timeout=300).status_code,
                range(N),
            )
        )
    took = time.time() - started
    stop[0] = True
    for t in threads:
        t.join()
    time.sleep(1)
    print(
        f"{label}\n  {N} at once, {len(body):,} bytes each: statuses {sorted(set(statuses))}, "
        f"{took:.1f} s; RSS before {before} MB, peak {peak[0]} MB, after {rss_mb()} MB; "
        f"/health worst {max(latencies):.2f} s"
    )

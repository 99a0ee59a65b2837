#!/usr/bin/env python3
"""One tenant's hung receiver against another tenant's webhooks, on a standalone binary.

Usage: infra/load/hung_receiver.py BIN [INSTANCES_A [ROUNDS]]   (defaults 8 and 8)

Tenant a has INSTANCES_A instances and 20 project subscriptions to a receiver that accepts
connections and never answers; its calculatePrices makes INSTANCES_A x 20 deliveries
there. Then tenant b, whose receiver answers at once, calls calculatePrices ROUNDS times,
5 s apart, and the script prints how long each of b's webhooks took to arrive
(docs/webhooks.md, "One destination cannot take the whole pool")."""
import json, re, shutil, socket, subprocess, sys, tempfile, threading, time, urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
BIN = sys.argv[1]
NA = int(sys.argv[2]) if len(sys.argv) > 2 else 8
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 8
data = tempfile.mkdtemp(prefix="hung-receiver-")
# a receiver that accepts and never answers
hung = socket.socket(); hung.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); hung.bind(("127.0.0.1", 0)); hung.listen(1000)
conns = []
threading.Thread(target=lambda: [conns.append(hung.accept()) for _ in iter(int, 1)], daemon=True).start()
class Ok(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0))); self.send_response(204); self.send_header("content-length", "0"); self.end_headers()
ok = ThreadingHTTPServer(("127.0.0.1", 0), Ok); threading.Thread(target=ok.serve_forever, daemon=True).start()
srv = subprocess.Popen([BIN, "serve", "--listen", "127.0.0.1:0", "--data", data, "--callback-policy", "local", "--metrics-listen", "off"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
api = None
while api is None:
    m = re.search(r"listening on (http://\S+)", srv.stdout.readline() or "")
    if m: api = m.group(1)
tok = lambda t: subprocess.run([BIN, "token", "--tenant", t, "--data", data], capture_output=True, text=True).stdout.strip().splitlines()[-1]
ta, tb = tok("a"), tok("b")
def call(m, p, b, t):
    r = urllib.request.Request(api + p, data=json.dumps(b).encode() if b is not None else None, method=m)
    r.add_header("Authorization", "Bearer " + t); r.add_header("content-type", "application/json")
    with urllib.request.urlopen(r, timeout=30) as x: return json.loads(x.read() or b"null")
def mk(t, proj, n):
    call("POST", "/projects", {"projectId": proj}, t)
    for k in range(n):
        call("POST", f"/projects/{proj}/instances", {"instanceId": f"i{k}"}, t)
        call("POST", f"/projects/{proj}/instances/i{k}/entries", {"entries": [{"type": "productRegistration", "data": {"productId": "ga", "capacity": 10}},
            {"type": "itemRegistration", "data": {"itemId": "a", "productId": "ga", "salesPeriod": {"start": "2026-11-01T00:00:00Z", "end": "2027-07-01T16:00:00Z"}, "priceSettings": {"min": 1, "max": 9, "default": 5}}}]}, t)
mk(ta, "slow", NA); mk(tb, "fast", 1)
for k in range(20): call("POST", "/projects/slow/subscriptions", {"callbackUrl": f"http://127.0.0.1:{hung.getsockname()[1]}/never{k}"}, ta)
fast = call("POST", "/projects/fast/subscriptions", {"callbackUrl": f"http://127.0.0.1:{ok.server_address[1]}/ok"}, tb)["subscriptionId"]
time.sleep(1)
call("POST", "/projects/slow/calculatePrices", {}, ta)
print(f"tenant a: {NA} instances x 20 subscriptions = {NA*20} deliveries to a receiver that never answers", flush=True)
time.sleep(0.5)
delays = []
for rnd in range(ROUNDS):
    t = time.time(); call("POST", "/projects/fast/calculatePrices", {}, tb)
    while True:
        d = call("GET", f"/projects/fast/subscriptions/{fast}/deliveries", None, tb)["items"]
        if len([x for x in d if x["status"] == "succeeded"]) > rnd: break
        time.sleep(0.05)
    delays.append(time.time() - t)
    print(f"tenant b round {rnd}: delivered {delays[-1]:.1f} s after its calculatePrices", flush=True)
    time.sleep(5)
srv.terminate(); srv.wait()
shutil.rmtree(data, ignore_errors=True)
print("delays:", " ".join(f"{d:.1f}" for d in delays))

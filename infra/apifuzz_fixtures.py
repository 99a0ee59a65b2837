#!/usr/bin/env python3
"""Fixtures of the API contract check (infra/apifuzz.sh): the resources the examples of
shared/api/openapi.json name, so that generated requests reach real resources and not
only 404s. Prints `export NAME=value` lines for the ids the service generates.

Usage: apifuzz_fixtures.py BASE_URL TOKEN
"""
import json
import sys
import time
import urllib.error
import urllib.request

base, token = sys.argv[1].rstrip("/"), sys.argv[2]


def call(method, path, body=None, ok=(200, 201, 202, 204)):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    if status not in ok:
        sys.exit(f"fixture {method} {path}: {status} {raw[:500]!r}")
    return status, (json.loads(raw) if raw else None)


call("POST", "/projects", {"projectId": "demo", "name": "Schemathesis"})
inst = "/projects/demo/instances/day-1"
call("POST", "/projects/demo/instances",
     {"instanceId": "day-1", "name": "Day 1", "timeZone": "Europe/Berlin", "active": True})
period = {"start": "2026-01-01T00:00:00Z", "end": "2030-01-01T00:00:00Z"}
prices = {"min": 10, "max": 90, "default": 40}
call("POST", inst + "/entries", {"entries": [
    {"type": "productRegistration", "transactionId": "fx-p1", "data": {"productId": "P1", "capacity": 100}},
    {"type": "itemRegistration", "transactionId": "fx-a1",
     "data": {"itemId": "A1", "productId": "P1", "salesPeriod": period, "priceSettings": prices}},
    {"type": "itemRegistration", "transactionId": "fx-a2",
     "data": {"itemId": "A2", "productId": "P1", "salesPeriod": period, "priceSettings": prices}},
    {"type": "itemSale", "transactionId": "fx-s1", "data": {"itemId": "A1", "quantity": 2, "price": 40}},
    # Rejected on processing (an unknown item): an entries.rejected event to read.
    {"type": "itemSale", "transactionId": "fx-s2", "data": {"itemId": "ghost", "price": 40}},
]})
# The processor applies the entries in the background.
for _ in range(300):
    status, _ = call("GET", inst + "/items/A2", ok=(200, 404))
    if status == 200:
        break
    time.sleep(0.1)
else:
    sys.exit("fixture: the items were not processed within 30 s")
call("POST", inst + "/priceMatches", {"matchId": "m1", "itemId": "A2", "sourceItemId": "A1", "ratio": 1.1})
call("POST", "/projects/demo/calculatePrices", {"instanceIds": ["day-1"]})
# A receiver that refuses connections: deliveries fail and are logged.
_, sub = call("POST", "/projects/demo/subscriptions",
              {"callbackUrl": "http://127.0.0.1:9/hook", "description": "apifuzz"})
call("POST", inst + "/subscriptions", {"callbackUrl": "http://127.0.0.1:9/instance-hook"})
print(f"export APIFUZZ_SUBSCRIPTION={sub['subscriptionId']}")

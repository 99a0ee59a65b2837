#!/usr/bin/env python3
"""A webhook receiver that verifies the pricing service's signatures.

    python3 receiver.py --port 8000 \
        --keys-url http://127.0.0.1:8080/webhooks/signatureVerificationKeys --token "$TOKEN"

Every webhook is checked against the service's published keys: an ECDSA P-256 / SHA-256
signature over method + path-with-query + Date header + body (concatenated, no
separators), sent hex-encoded DER in `x-signature-secp256r1-sha256`, made by the key named
in `x-signature-key-id`. A valid webhook is answered 204 and printed as one JSON line on
stdout; an invalid one is answered 401. Deduplicate on `webhook-id` (retries reuse it) and
keep the highest `data.sequence` of prices.updated per instance: webhooks can arrive twice
or out of order.

Needs the `cryptography` package (pip install cryptography).
"""

import argparse
import base64
import json
import sys
import threading
import urllib.request
from email.utils import parsedate_to_datetime
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec


def b64url(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Keys:
    """The published verification keys by kid, fetched again for an unknown kid (rotation)."""

    def __init__(self, url, token):
        self.url, self.token = url, token
        self.lock = threading.Lock()
        self.keys = {}
        self.refresh()

    def refresh(self):
        request = urllib.request.Request(self.url, headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            jwks = json.load(response)
        keys = {}
        for jwk in jwks["keys"]:
            numbers = ec.EllipticCurvePublicNumbers(
                int.from_bytes(b64url(jwk["x"]), "big"),
                int.from_bytes(b64url(jwk["y"]), "big"),
                ec.SECP256R1(),
            )
            keys[jwk["kid"]] = numbers.public_key()
        with self.lock:
            self.keys = keys

    def get(self, kid):
        with self.lock:
            key = self.keys.get(kid)
        if key is None:
            self.refresh()
            with self.lock:
                key = self.keys.get(kid)
        return key


def verify(keys, method, path, headers, body, max_age):
    """Whether the request carries a valid, fresh signature of the service."""
    key = keys.get(headers.get("x-signature-key-id", ""))
    if key is None:
        return False
    date = headers.get("Date", "")
    try:
        age = abs((datetime.now(timezone.utc) - parsedate_to_datetime(date)).total_seconds())
        signature = bytes.fromhex(headers.get("x-signature-secp256r1-sha256", ""))
    except (TypeError, ValueError):
        return False
    if age > max_age:
        return False
    message = method.encode() + path.encode() + date.encode() + body
    try:
        key.verify(signature, message, ec.ECDSA(hashes.SHA256()))
        return True
    except InvalidSignature:
        return False


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--keys-url", required=True)
    parser.add_argument("--token", required=True, help="bearer token for the keys endpoint")
    parser.add_argument("--max-age", type=int, default=300, help="seconds a Date may be off")
    args = parser.parse_args()
    keys = Keys(args.keys_url, args.token)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            ok = verify(keys, "POST", self.path, self.headers, body, args.max_age)
            self.send_response(204 if ok else 401)
            self.end_headers()
            if ok:
                event = json.loads(body)
                line = {"webhookId": self.headers["webhook-id"], "type": event["type"], "verified": True}
                print(json.dumps(line), flush=True)
            else:
                print(json.dumps({"verified": False, "path": self.path}), flush=True)

        def log_message(self, *_):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

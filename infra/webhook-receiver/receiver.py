#!/usr/bin/env python3
"""A webhook receiver that verifies the pricing service's signatures.

    python3 receiver.py --port 8000 --project-id shop --secrets-file secrets.txt \
        --keys-url http://127.0.0.1:8080/webhooks/signatureVerificationKeys --token "$TOKEN"

Every webhook must pass three checks, or it is answered 401:

- the service's signature, with its published keys: an ECDSA P-256 / SHA-256 signature over
  method + path-with-query + Date header + body (concatenated, no separators), sent
  hex-encoded DER in `x-signature-secp256r1-sha256`, made by the key named in
  `x-signature-key-id`. One key signs every tenant's webhooks: this says the service sent
  it, not that it was sent to you;
- the subscription's signature (Standard Webhooks): `webhook-signature` holds one or more
  space-separated `v1,<base64 HMAC-SHA256 of "{webhook-id}.{webhook-timestamp}.{body}">`,
  keyed with the base64-decoded part of the subscription's `whsec_` secret (shown when the
  subscription is created or its secret rotated). A webhook meant for another subscription,
  even a genuine one, fails here. The secrets file holds one secret per line and is read
  again for every webhook: during a rotation list the new and the old one;
- the envelope's `projectId` is this receiver's project (`--project-id`).

Date and webhook-timestamp must be within --max-age seconds of now (replays). A valid
webhook is answered 204 and printed as one JSON line on stdout. Deduplicate on `webhook-id`
(retries reuse it) and keep the highest `data.sequence` of prices.updated per instance:
webhooks can arrive twice or out of order.

Needs the `cryptography` package (pip install cryptography).
"""

import argparse
import base64
import hashlib
import hmac
import json
import sys
import threading
import time
import urllib.request
from email.utils import parsedate_to_datetime
from datetime import datetime, timedelta, timezone
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
            # A retired key stays listed (the log's entries it signed still verify) but
            # signs nothing 10 minutes after `retiredAt`: later signatures are not the
            # service's.
            last = None
            if jwk.get("status") == "retired" and jwk.get("retiredAt"):
                retired = datetime.fromisoformat(jwk["retiredAt"].replace("Z", "+00:00"))
                last = retired + timedelta(minutes=11)
            keys[jwk["kid"]] = (numbers.public_key(), last)
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
    found = keys.get(headers.get("x-signature-key-id", ""))
    if found is None:
        return False
    key, last = found
    date = headers.get("Date", "")
    try:
        dated = parsedate_to_datetime(date)
        age = abs((datetime.now(timezone.utc) - dated).total_seconds())
        signature = bytes.fromhex(headers.get("x-signature-secp256r1-sha256", ""))
    except (TypeError, ValueError):
        return False
    if age > max_age or (last is not None and dated > last):
        return False
    message = method.encode() + path.encode() + date.encode() + body
    try:
        key.verify(signature, message, ec.ECDSA(hashes.SHA256()))
        return True
    except InvalidSignature:
        return False


def read_secrets(path):
    """The subscription secrets of the file (one `whsec_...` per line), as HMAC keys."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = [line.strip() for line in f]
    except OSError:
        return []
    keys = []
    for line in lines:
        if line:
            try:
                keys.append(base64.b64decode(line.removeprefix("whsec_"), validate=True))
            except ValueError:
                pass
    return keys


def verify_standard(secrets, headers, body, max_age):
    """Whether `webhook-signature` holds a fresh v1 signature under one of the secrets."""
    msg_id = headers.get("webhook-id", "")
    timestamp = headers.get("webhook-timestamp", "")
    try:
        if abs(time.time() - int(timestamp)) > max_age:
            return False
    except ValueError:
        return False
    signed = f"{msg_id}.{timestamp}.".encode() + body
    offered = [s[3:] for s in headers.get("webhook-signature", "").split(" ") if s.startswith("v1,")]
    for secret in secrets:
        expected = base64.b64encode(hmac.new(secret, signed, hashlib.sha256).digest()).decode()
        if any(hmac.compare_digest(expected, sig) for sig in offered):
            return True
    return False


def check(keys, args, path, headers, body):
    """None when the webhook is valid and for this project, else why not."""
    if not verify(keys, "POST", path, headers, body, args.max_age):
        return "service signature"
    if not verify_standard(read_secrets(args.secrets_file), headers, body, args.max_age):
        return "subscription signature"
    try:
        project = json.loads(body).get("projectId")
    except (ValueError, AttributeError):
        return "body"
    if project != args.project_id:
        return "project"
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--keys-url", required=True)
    parser.add_argument("--token", required=True, help="bearer token for the keys endpoint")
    parser.add_argument("--project-id", required=True, help="the only project accepted")
    parser.add_argument(
        "--secrets-file", required=True, help="the subscription's whsec_ secrets, one per line"
    )
    parser.add_argument(
        "--max-age", type=int, default=300, help="seconds Date and webhook-timestamp may be off"
    )
    args = parser.parse_args()
    keys = Keys(args.keys_url, args.token)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            refused = check(keys, args, self.path, self.headers, body)
            self.send_response(401 if refused else 204)
            self.end_headers()
            if refused is None:
                event = json.loads(body)
                line = {
                    "webhookId": self.headers["webhook-id"],
                    "type": event["type"],
                    "subscriptionId": event.get("subscriptionId"),
                    "verified": True,
                }
                print(json.dumps(line), flush=True)
            else:
                line = {"verified": False, "path": self.path, "refused": refused}
                print(json.dumps(line), flush=True)

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

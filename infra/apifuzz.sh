#!/usr/bin/env bash
# The API contract check of the test command (docs/api.md, "The OpenAPI document"):
#  1. openapi-spec-validator validates shared/api/openapi.json (OpenAPI 3.1);
#  2. Schemathesis runs every check against the standalone binary, started on a free
#     loopback port with a fresh data directory and a token, with a fixed seed and a
#     bounded number of examples per operation (about a minute in a debug build).
# Configuration: infra/schemathesis.toml (what the service deliberately does beyond what the
# document can say, each with a comment). Environment:
#   APIFUZZ_BIN       the standalone binary (default: target/debug/standalone, built first)
#   APIFUZZ_EXAMPLES  examples per operation and phase (default 50)
#   APIFUZZ_SEED      the seed (default 20260519)
#   APIFUZZ_TIMEOUT   seconds Schemathesis may take before the check fails (default 240)
# Usage: infra/apifuzz.sh [extra schemathesis options]
set -euo pipefail
cd "$(dirname "$0")/.."

infra/venv.sh
spec=shared/api/openapi.json
echo "== openapi-spec-validator $spec"
.venv/bin/openapi-spec-validator "$spec"
echo "== every example of $spec against its schema"
.venv/bin/python - "$spec" <<'PY'
import json, sys
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

doc = json.load(open(sys.argv[1]))
registry = Registry().with_resource("urn:doc", Resource(contents=doc, specification=DRAFT202012))

def local(schema):
    return {"$ref": "urn:doc" + schema["$ref"]} if "$ref" in schema else schema

checked, failed = 0, []
def check(where, schema, example):
    global checked
    checked += 1
    errors = [e.message for e in Draft202012Validator(local(schema), registry=registry).iter_errors(example)]
    if errors:
        failed.append(f"{where}: {errors[:3]}")

for name, schema in doc["components"]["schemas"].items():
    if "example" in schema:
        check(f"schema {name}", {"$ref": f"#/components/schemas/{name}"}, schema["example"])
parameters = doc["components"].get("parameters", {})
for path, item in doc["paths"].items():
    for method, op in item.items():
        for p in op.get("parameters", []):
            p = parameters[p["$ref"].rsplit("/", 1)[1]] if "$ref" in p else p
            if "example" in p:
                check(f"{method} {path} {p['name']}", p["schema"], p["example"])
        for ct, media in op.get("requestBody", {}).get("content", {}).items():
            if "example" in media:
                check(f"{method} {path} body", media["schema"], media["example"])
if failed:
    sys.exit("examples that do not fit their schemas:\n" + "\n".join(failed))
print(f"{checked} examples fit their schemas")
PY

bin=${APIFUZZ_BIN:-}
if [ -z "$bin" ]; then
  # Up to date after the test command's cargo test (a no-op then).
  cargo build -p standalone --bin standalone --locked
  bin=target/debug/standalone
fi

work=$(mktemp -d)
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# The run acts as one tenant; requests without the token must be 401 (ignored_auth check).
token=$("$bin" token --data "$work/data" --tenant apifuzz | tail -n 1)
"$bin" serve --listen 127.0.0.1:0 --data "$work/data" --schedule-tick 3600 \
  > "$work/serve.log" 2>&1 &
server_pid=$!
base=
for _ in $(seq 1 200); do
  base=$(sed -n 's/.*listening on \(http:\/\/[0-9.:]*\).*/\1/p' "$work/serve.log" | head -n 1)
  [ -n "$base" ] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/serve.log"; exit 1; }
  sleep 0.1
done
[ -n "$base" ] || { echo "the standalone did not start"; cat "$work/serve.log"; exit 1; }
echo "== schemathesis against $base"

# Fixtures the examples of the document name (project "demo", instance "day-1", items
# "A1" and "A2" of product "P1", a price match "m1", subscriptions), so positive examples
# reach real resources and not only 404s; the subscription id (generated) is exported for
# infra/schemathesis.toml.
eval "$(.venv/bin/python infra/apifuzz_fixtures.py "$base" "$token")"
export APIFUZZ_SUBSCRIPTION

# Bounded: a run that outlasts APIFUZZ_TIMEOUT seconds (default 240) fails.
timeout "${APIFUZZ_TIMEOUT:-240}" \
  .venv/bin/schemathesis --config-file infra/schemathesis.toml run "$spec" \
  --url "$base" \
  -H "Authorization: Bearer $token" \
  --checks all \
  --seed "${APIFUZZ_SEED:-20260519}" \
  --max-examples "${APIFUZZ_EXAMPLES:-50}" \
  --generation-database none \
  --no-color \
  "$@"

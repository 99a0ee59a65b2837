#!/usr/bin/env python3
"""Writes the hand-made seeds of the fuzz corpus (fuzz/corpus/<target>/seed-*.json).

Run from anywhere: `python3 fuzz/seeds/make_seeds.py`. The seeds are valid entries of
every kind plus the known attacks of issue 9 (copy amplification, depth bomb); what the
fuzzer finds interesting is added beside them by infra/fuzz.sh (minimised).
"""
import base64
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent / "corpus"

PERIOD = {"start": "2026-05-01T00:00:00Z", "end": "2026-07-01T00:00:00Z"}
PRODUCT = {"type": "productRegistration", "transactionId": "reg-P", "data": {
    "productId": "P", "capacity": 100, "pricingModel": {"type": "pace", "sensitivity": 0.5},
    "expectedSales": 0.9, "recalculation": {"soldPercentStep": 5}, "rounding": {"step": 0.5},
    "metadata": {"zone": "A"}}}
PRODUCT_TIERS = {"type": "productRegistration", "data": {
    "productId": "Q", "pricingModel": {"type": "tiers", "tiers": [
        {"upToSoldPercent": 50, "multiplier": 1}, {"multiplier": 1.5}]},
    "properties": {"capacity": 10, "colour": "red"}, "strict": True}}
PRODUCT_TIME = {"type": "productRegistration", "data": {
    "productId": "R", "pricingModel": {"type": "timeBased", "steps": [
        {"daysBefore": 7, "multiplier": 1.2}], "maxStepChange": 0.1}}}
PRODUCT_NAMED = {"type": "productRegistration", "data": {"productId": "S", "pricingModel": "fixed"}}
ITEM = {"type": "itemRegistration", "transactionId": "reg-A", "data": {
    "itemId": "A", "productId": "P", "salesPeriod": PERIOD,
    "dynamicPricingPeriod": {"start": "2026-05-02T00:00:00Z", "end": "2026-06-30T00:00:00Z"},
    "priceSettings": {"min": 10, "max": 100, "default": 50, "multiplier": 1.1},
    "metadata": {"row": 1, "seat": "12"}, "quantity": 5}}
ITEM_B = {"type": "itemRegistration", "data": {
    "itemId": "B", "productId": "P", "properties": {
        "dates": PERIOD, "priceSettings": {"min": 0, "max": 5.5, "default": 5}, "note": "x"}}}
SALE = {"type": "itemSale", "timestamp": "2026-05-19T11:59:00Z", "data": {
    "itemId": "A", "quantity": 2, "price": 19.99, "basePrice": 50, "pool": True,
    "currency": "EUR", "tax": {"vatPercent": 19, "included": True},
    "breakdown": [{"component": "fee", "amount": 1.5}], "soldAt": "2026-05-19T11:58:00Z"}}
SALE_B = {"type": "itemSale", "data": {"itemId": "B", "price": 5}}
RETURN = {"type": "itemSale", "data": {"itemId": "A", "quantity": -1, "price": 19.99}}
BIG_RETURN = {"type": "itemSale", "data": {"itemId": "A", "quantity": -9, "price": 1}}
QUANTITY = {"type": "itemQuantity", "data": {"itemId": "A", "total": 40}}
QUANTITY_ABS = {"type": "itemQuantity", "data": {"itemId": "B", "change": {"absolute": 0}}}
RES_ITEM = {"type": "itemReservation", "data": {"itemId": "A", "reserved": 3}}
RES_PRODUCT = {"type": "itemReservation", "data": {"productId": "P", "reserved": 4}}
SCHED = {"type": "pricingSchedule", "data": {"interval": "PT15M"}}
SCHED_TIMES = {"type": "pricingSchedule", "data": {"times": ["18:00", "09:30"]}}
ACTIONS = {"type": "instanceActions", "data": {"actions": [
    {"action": "enable", "date": "2026-05-01T00:00:00Z"},
    {"action": "disable", "date": "2026-06-01T00:00:00Z"}]}}
META = {"type": "instanceMetadata", "data": {"patch": [
    {"op": "add", "path": "/dates", "value": [{"date": {
        "start": "2026-06-01T18:00:00Z", "end": "2026-06-01T22:00:00Z"}, "tags": ["main"],
        "description": "show"}]},
    {"op": "add", "path": "/location", "value": {"coord": {"lat": 52.5, "lon": 13.4}}},
    {"op": "test", "path": "/dates/0/tags/0", "value": "main"}]}}
META_UPDATE = {"type": "instanceMetadata", "data": {"update": {"name": "x", "gone": None}}}
ITEM_META = {"type": "itemMetadata", "data": {"itemId": "A", "patch": [
    {"op": "copy", "from": "/row", "path": "/row2"},
    {"op": "move", "from": "/seat", "path": "/place"},
    {"op": "remove", "path": "/row"}]}}
ITEM_META_UPDATE = {"type": "itemMetadata", "data": {"itemId": "B", "update": {"k": [1, {"a": None}]}}}
ITEM_PROPS = {"type": "itemProperties", "data": {"itemId": "A", "patch": [
    {"op": "replace", "path": "/priceSettings/default", "value": 20},
    {"op": "add", "path": "/dynamicPricing", "value": False}]}}
PRODUCT_PROPS = {"type": "productProperties", "data": {"productId": "P", "patch": [
    {"op": "replace", "path": "/capacity", "value": 50},
    {"op": "add", "path": "/pricingModel", "value": {"type": "revenue"}}]}}
PRODUCT_PROPS_UPDATE = {"type": "productProperties", "data": {"productId": "P", "update": {"expectedSales": 0.5}}}
PRODUCT_META = {"type": "productMetadata", "data": {"productId": "P", "patch": [
    {"op": "add", "path": "/tags", "value": ["a", "b"]},
    {"op": "add", "path": "/tags/-", "value": "c"},
    {"op": "move", "from": "/tags/0", "path": "/tags/2"}]}}
REMOVAL = {"type": "itemRemoval", "data": {"itemId": "B"}}

# Issue 9, items 1 and 2: one add and many copies of the root; two adds 233 levels deep.
AMPLIFY = {"type": "instanceMetadata", "data": {"patch": [
    {"op": "add", "path": "/a", "value": "x" * 1000}] + [
    {"op": "copy", "from": "", "path": "/c%d" % i} for i in range(20)]}}


def nested(levels):
    v = {}
    for _ in range(levels):
        v = {"d": v}
    return v


DEPTH = {"type": "itemMetadata", "data": {"itemId": "A", "patch": [
    {"op": "add", "path": "/deep", "value": nested(30)},
    {"op": "copy", "from": "/deep", "path": "/deep/d/d/d/x"}]}}

KINDS = [PRODUCT, PRODUCT_TIERS, PRODUCT_TIME, PRODUCT_NAMED, ITEM, ITEM_B, SALE, SALE_B,
         RETURN, QUANTITY, QUANTITY_ABS, RES_ITEM, RES_PRODUCT, SCHED, SCHED_TIMES, ACTIONS,
         META, META_UPDATE, ITEM_META, ITEM_META_UPDATE, ITEM_PROPS, PRODUCT_PROPS,
         PRODUCT_PROPS_UPDATE, PRODUCT_META, REMOVAL]


def jws(payload):
    body = base64.urlsafe_b64encode(json.dumps(payload).encode()).rstrip(b"=").decode()
    return "eyJhbGciOiJFUzI1NiIsImtpZCI6ImNsaWVudCJ9.%s.c2ln" % body


def write(target, name, value):
    d = ROOT / target
    d.mkdir(parents=True, exist_ok=True)
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    (d / ("seed-%s.json" % name)).write_text(text)


def main():
    # entry: each kind alone, request bodies, client JWS strings, old and bad shapes.
    for e in KINDS:
        write("entry", e["type"] + "-" + str(KINDS.index(e)), e)
    write("entry", "request", {"requestId": "r-1", "entries": [PRODUCT, ITEM, SALE, jws(RETURN)]})
    write("entry", "bare-array", [SALE, SALE_B, {"type": "itemSale", "transactionId": "t~1", "data": {"itemId": "A", "price": 1}}])
    write("entry", "jws", jws(SALE))
    write("entry", "jws-in-request", {"entries": [jws(ITEM), "a.b", "a.!!.c"]})
    write("entry", "removed-kind", {"entries": [{"type": "instanceDates", "data": {}}, {"type": "expectedSales", "data": {}}]})
    write("entry", "future", {"type": "itemSale", "timestamp": "2099-01-01T00:00:00Z", "data": {"itemId": "A", "price": 1}})
    write("entry", "amplify", {"entries": [AMPLIFY]})
    write("entry", "depth", {"entries": [DEPTH]})
    write("entry", "errors", {"requestId": "bad id", "entries": [{"type": "itemSale", "data": {"itemId": "A?", "quantity": 0, "price": -1, "currency": "eur"}}, 3, None]})

    # patch: [document, change].
    doc = {"a": 1, "b": [1, 2, {"c": "d"}], "e~f": {"g/h": True}}
    patches = {
        "rfc-ops": [{"op": "add", "path": "/x", "value": {"y": []}},
                    {"op": "add", "path": "/x/y/-", "value": 1},
                    {"op": "replace", "path": "/a", "value": "z"},
                    {"op": "remove", "path": "/b/0"},
                    {"op": "test", "path": "/e~0f/g~1h", "value": True}],
        "copy-move": [{"op": "copy", "from": "/b", "path": "/b2"},
                      {"op": "move", "from": "/b/1", "path": "/b/0"},
                      {"op": "move", "from": "/b2", "path": "/b/-"}],
        "move-into-itself": [{"op": "move", "from": "/b", "path": "/b/0"}],
        "move-to-self": [{"op": "move", "from": "/a", "path": "/a"}],
        "bad-index": [{"op": "add", "path": "/b/01", "value": 1}, {"op": "remove", "path": "/b/9"}],
        "replace-root": [{"op": "replace", "path": "", "value": {"new": 1}}],
        "amplify": [{"op": "add", "path": "/s", "value": "x" * 1000}] + [
            {"op": "copy", "from": "", "path": "/c%d" % i} for i in range(20)],
        "depth": [{"op": "add", "path": "/deep", "value": nested(30)},
                  {"op": "copy", "from": "/deep", "path": "/deep/d/x"}],
        "test-fails": [{"op": "test", "path": "/a", "value": 2}],
        "move-array": [{"op": "move", "from": "/b/0", "path": "/b/2"},
                       {"op": "move", "from": "/b/2", "path": "/b/-"}],
    }
    for name, p in patches.items():
        write("patch", name, [doc, p])
    write("patch", "update", [doc, {"a": None, "n": {"m": [1]}, "zz": None}])
    write("patch", "update-not-object", [[1, 2], {"a": 1}])
    write("patch", "array-root", [[1, [2]], [{"op": "add", "path": "/1/0", "value": 3}, {"op": "copy", "from": "/1", "path": "/-"}]])
    write("patch", "empty", [{}, []])

    # apply: sequences from an empty instance.
    base = [PRODUCT, PRODUCT_TIERS, ITEM, ITEM_B]
    write("apply", "all-kinds", base + [SALE, SALE_B, RETURN, QUANTITY, QUANTITY_ABS, RES_ITEM,
                                         RES_PRODUCT, SCHED, SCHED_TIMES, ACTIONS, META,
                                         META_UPDATE, ITEM_META, ITEM_META_UPDATE, ITEM_PROPS,
                                         PRODUCT_PROPS, PRODUCT_PROPS_UPDATE, PRODUCT_META,
                                         REMOVAL])
    write("apply", "sales", base + [SALE, SALE, RETURN, BIG_RETURN, {"type": "itemSale", "data": {"itemId": "A", "quantity": 9223372036854775807, "price": 0}}, SALE])
    huge = {"type": "itemSale", "data": {"itemId": "A", "quantity": 9223372036854775807, "price": 0}}
    write("apply", "sold-saturates", base + [huge, huge, huge, {"type": "itemSale", "data": {"itemId": "A", "quantity": -9223372036854775807, "price": 0}}, SALE])
    write("apply", "removal", base + [REMOVAL, SALE_B, ITEM_B, {"type": "itemMetadata", "data": {"itemId": "B", "update": {"a": 1}}}])
    write("apply", "unknown", [SALE, ITEM, PRODUCT_PROPS, REMOVAL, PRODUCT, ITEM])
    write("apply", "strict", [PRODUCT_TIERS, PRODUCT_TIERS, PRODUCT, PRODUCT])
    write("apply", "amplify", [AMPLIFY, META])
    write("apply", "depth", base + [DEPTH])
    write("apply", "jws", [jws(PRODUCT), jws(ITEM), jws(SALE), "not.a.jws", "eyJ9.e30.c2ln"])
    write("apply", "properties", base + [ITEM_PROPS, {"type": "itemProperties", "data": {"itemId": "A", "patch": [{"op": "remove", "path": "/priceSettings"}]}}, {"type": "productProperties", "data": {"productId": "P", "patch": [{"op": "replace", "path": "", "value": {}}]}}])
    write("apply", "reservations", base + [RES_ITEM, RES_PRODUCT, {"type": "itemQuantity", "data": {"itemId": "A", "total": 2}}, SALE, QUANTITY])


main()

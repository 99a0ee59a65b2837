#!/usr/bin/env python3
"""The AWS emulator of the tests: moto with a cheaper TransactWriteItems and Query.

Started by infra/test.sh for the whole test command, by pricing_emulator when a test runs
alone, and by the chaos runs (tests/chaos.rs).

moto backs up every table a TransactWriteItems touches with a deep copy of the whole table
before it starts (to roll back a cancelled transaction), so each transaction costs time and
memory in proportion to the table's size: ~0.4 ms per stored item, seconds per transaction
once a chaos run has stored tens of thousands of items, and a shared server that grew past
10 GB during the test command. Here the backup holds only the items the transaction names,
and a cancelled transaction puts those back. That is the same rollback as long as no other
DynamoDB request runs meanwhile, which the tests mostly guarantee: every test process sends
one DynamoDB request at a time (`pricing_aws::emulator::emulator_sdk_config`, the chaos
runs' fault proxy) and cargo runs one test process at a time. Where two processes do send
at once (a test and a Lambda bootstrap it runs), putting back only the named items undoes
less of the other's work than plain moto's restore of the whole table does.

moto's Query also costs time in proportion to the table's size (it walks and sorts every
item of the table); here it walks the queried partition only (see `query` below).

Usage: moto_lean.py PORT   (serves on 127.0.0.1:PORT)
"""
import copy
import os
import sys
import threading
import time

import moto.dynamodb.models as models
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.models.table import Table


class _NoTableCopy:
    """Stands in for the `copy` module inside moto.dynamodb.models: deep copies of whole
    tables become the table itself (so moto's own rollback is a no-op)."""

    def __getattr__(self, name):
        return getattr(copy, name)

    @staticmethod
    def deepcopy(x, memo=None):
        if isinstance(x, Table):
            return x
        return copy.deepcopy(x, memo)


models.copy = _NoTableCopy()
_original = models.DynamoDBBackend.transact_write_items


def _key_of(table, op_type, op):
    attrs = op["Item"] if op_type == "Put" else op.get("Key", {})
    h = DynamoType(attrs[table.hash_key_attr])
    r = DynamoType(attrs[table.range_key_attr]) if table.range_key_attr else None
    return h, r


def transact_write_items(self, transact_items):
    backup = []
    for item in transact_items:
        try:
            op_type, op = next(iter(item.items()))
            table = self.tables.get(op.get("TableName"))
            if table is None:
                continue
            h, r = _key_of(table, op_type, op)
            current = table.get_item(h, r)
            backup.append((table, h, r, copy.deepcopy(current)))
        except Exception:  # a malformed action: moto reports it, nothing to back up
            continue
    try:
        return _original(self, transact_items)
    except Exception:
        for table, h, r, old in reversed(backup):
            if r is None:
                if old is None:
                    table.items.pop(h, None)
                else:
                    table.items[h] = old
            else:
                if old is None:
                    table.items.get(h, {}).pop(r, None)
                    if h in table.items and not table.items[h]:
                        del table.items[h]
                else:
                    table.items[h][r] = old
        raise


models.DynamoDBBackend.transact_write_items = transact_write_items


# moto's Table.query walks every item of the table (Table.all_items, which also sorts the
# whole table by key) to find one partition's items, and a query on the index walks and
# sorts it all too: a query costs time in proportion to the table's size (~1 s per query
# at 40,000 items), and a chaos run's pace falls as its table grows. Here a query on the
# table takes its partition's items alone (the same items: those whose hash key is the
# query's), and a query on an index walks the items unsorted (moto then sorts its matches
# by the index's and the table's keys, a total order of their own).
_scope = threading.local()
_all_items = Table.all_items
_query = Table.query


def all_items(self):
    scope = getattr(_scope, "value", None)
    if scope is None:
        return _all_items(self)
    kind, hash_key = scope
    if kind == "index":
        if not self.range_key_attr:
            return list(self.items.values())
        return [item for part in self.items.values() for item in part.values()]
    if not self.range_key_attr:
        item = self.items.get(hash_key)
        return [] if item is None else [item]
    return list(self.items.get(hash_key, {}).values())


def query(self, hash_key, *args, **kwargs):
    index_name = args[6] if len(args) > 6 else kwargs.get("index_name")
    _scope.value = ("index", None) if index_name else ("table", hash_key)
    try:
        return _query(self, hash_key, *args, **kwargs)
    finally:
        _scope.value = None


Table.all_items = all_items
Table.query = query


# MOTO_LEAN_TIMES=FILE: a line per request (unix time at its end, handler, action, ms in
# moto, items stored in all DynamoDB tables), to tell the emulator's time from the
# waits between calls (the chaos runs: docs/guarantees.md).
_times_path = os.environ.get("MOTO_LEAN_TIMES")
if _times_path:
    from moto.core.responses import BaseResponse

    _times_file = open(_times_path, "a", buffering=1)
    _call_action = BaseResponse.call_action

    def _stored_items():
        n = 0
        for account in models.dynamodb_backends.values():
            for backend in account.values():
                for t in backend.tables.values():
                    n += sum(len(v) if t.range_key_attr else 1 for v in t.items.values())
        return n

    def _timed_call_action(self):
        started = time.perf_counter()
        try:
            return _call_action(self)
        finally:
            ms = (time.perf_counter() - started) * 1000
            try:
                action = self._get_action()
            except Exception:  # noqa: BLE001 (a request moto could not name)
                action = "?"
            _times_file.write(
                f"{time.time():.3f} {type(self).__name__} {action} {ms:.2f} {_stored_items()}\n"
            )

    BaseResponse.call_action = _timed_call_action

if __name__ == "__main__":
    from moto.server import main

    port = sys.argv[1]
    main(["-H", "127.0.0.1", "-p", port])

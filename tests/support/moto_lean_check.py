#!/usr/bin/env python3
"""Checks moto_lean.py's Query against plain moto's: 400 random queries (on the table and
on an index, key conditions, filters, limits, both directions, every page) on 3,000 items
in 20 partitions give the same pages, counts and LastEvaluatedKeys. Then times a query as
the table grows (plain moto, then moto_lean).

Usage: .venv/bin/python tests/support/moto_lean_check.py
"""
import importlib.util
import pathlib
import random
import time

import boto3
from moto import mock_aws
from moto.dynamodb.models.table import Table

plain_query = Table.query
spec = importlib.util.spec_from_file_location(
    "moto_lean", pathlib.Path(__file__).with_name("moto_lean.py")
)
spec.loader.exec_module(importlib.util.module_from_spec(spec))
lean_query = Table.query


def create(c):
    c.create_table(
        TableName="t",
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": a, "AttributeType": "S"} for a in ["pk", "sk", "g", "gs"]
        ],
        BillingMode="PAY_PER_REQUEST",
        GlobalSecondaryIndexes=[
            {
                "IndexName": "gsi1",
                "KeySchema": [
                    {"AttributeName": "g", "KeyType": "HASH"},
                    {"AttributeName": "gs", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
    )


def same_answers():
    rnd = random.Random(1)
    c = boto3.client("dynamodb", region_name="us-east-1")
    create(c)
    for n in range(3000):
        item = {
            "pk": {"S": f"p{rnd.randrange(20)}"},
            "sk": {"S": f"s{rnd.randrange(500):04d}"},
            "v": {"N": str(n)},
        }
        if rnd.random() < 0.3:
            item["g"] = {"S": f"G{rnd.randrange(3)}"}
            item["gs"] = {"S": f"{rnd.randrange(50):03d}"}
        c.put_item(TableName="t", Item=item)
    compared = 0
    for _ in range(400):
        if rnd.random() < 0.5:
            kw = {
                "KeyConditionExpression": "pk = :p AND sk > :s",
                "ExpressionAttributeValues": {
                    ":p": {"S": f"p{rnd.randrange(22)}"},
                    ":s": {"S": f"s{rnd.randrange(500):04d}"},
                },
            }
            if rnd.random() < 0.3:
                kw["KeyConditionExpression"] = "pk = :p"
                del kw["ExpressionAttributeValues"][":s"]
        else:
            kw = {
                "IndexName": "gsi1",
                "KeyConditionExpression": "g = :p AND gs < :s",
                "ExpressionAttributeValues": {
                    ":p": {"S": f"G{rnd.randrange(4)}"},
                    ":s": {"S": f"{rnd.randrange(50):03d}"},
                },
            }
        if rnd.random() < 0.5:
            kw["Limit"] = rnd.randrange(1, 30)
        if rnd.random() < 0.3:
            kw["ScanIndexForward"] = False
        if rnd.random() < 0.3:
            kw["FilterExpression"] = "v > :v"
            kw["ExpressionAttributeValues"][":v"] = {"N": "1500"}
        answers = []
        for query in (plain_query, lean_query):
            Table.query = query
            pages, request = [], dict(kw, TableName="t")
            while True:
                r = c.query(**request)
                pages.append((r["Items"], r.get("LastEvaluatedKey"), r["Count"], r["ScannedCount"]))
                if "LastEvaluatedKey" not in r:
                    break
                request["ExclusiveStartKey"] = r["LastEvaluatedKey"]
            answers.append(pages)
        assert answers[0] == answers[1], kw
        compared += sum(len(p[0]) for p in answers[0])
    Table.query = lean_query
    print(f"400 queries, {compared} items: the same answers")


def timings():
    for name, query in (("plain moto", plain_query), ("moto_lean", lean_query)):
        Table.query = query
        with mock_aws():
            c = boto3.client("dynamodb", region_name="us-east-1")
            create(c)
            n, out = 0, []
            for size in (1000, 5000, 20000):
                while n < size:
                    c.put_item(
                        TableName="t",
                        Item={"pk": {"S": f"p{n % 50}"}, "sk": {"S": f"s{n:08d}"}, "v": {"S": "x" * 200}},
                    )
                    n += 1
                started = time.perf_counter()
                for _ in range(20):
                    c.query(
                        TableName="t",
                        KeyConditionExpression="pk = :p AND sk > :s",
                        ExpressionAttributeValues={":p": {"S": "p1"}, ":s": {"S": "s99999999"}},
                    )
                out.append(f"{size} items {(time.perf_counter() - started) / 20 * 1000:.1f} ms")
            print(f"a query, {name}: {', '.join(out)}")
    Table.query = lean_query


if __name__ == "__main__":
    with mock_aws():
        same_answers()
    timings()

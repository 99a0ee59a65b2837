#!/usr/bin/env python3
"""AWS emulator support for the tests: provision the stack's data resources on moto.

The resources come from template.yaml itself (the file `sam deploy` deploys): every
AWS::DynamoDB::Table, AWS::SQS::Queue and AWS::SecretsManager::Secret is created with its
properties, names get a prefix so test runs never share state, and the function
environment (Globals.Function.Environment.Variables) is resolved to the created names and
URLs, exactly as CloudFormation resolves !Ref/!GetAtt on deploy. Prints that environment as
JSON.

Usage: infra/emulator.py provision --endpoint http://127.0.0.1:PORT --prefix NAME
"""
import argparse
import json
import os
import sys

import boto3
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATE = os.path.join(HERE, "..", "template.yaml")


class Tag:
    def __init__(self, tag, value):
        self.tag, self.value = tag, value


def _construct(loader, suffix, node):
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    return Tag(suffix, value)


class Loader(yaml.SafeLoader):
    pass


Loader.add_multi_constructor("!", _construct)


def load_template(path=TEMPLATE):
    with open(path) as f:
        return yaml.load(f, Loader=Loader)


def client(service, endpoint):
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )


def provision(endpoint, prefix, template=None):
    template = template or load_template()
    resources = template["Resources"]
    refs, arns = {}, {}
    ddb, sqs, sm = client("dynamodb", endpoint), client("sqs", endpoint), client("secretsmanager", endpoint)

    def resolve(value):
        if isinstance(value, Tag):
            if value.tag == "Ref":
                return refs[value.value]
            if value.tag == "GetAtt":
                name, attr = value.value.split(".") if isinstance(value.value, str) else value.value
                assert attr == "Arn", attr
                return arns[name]
            raise ValueError(f"unsupported intrinsic !{value.tag}")
        if isinstance(value, dict):
            return {k: resolve(v) for k, v in value.items()}
        if isinstance(value, list):
            return [resolve(v) for v in value]
        return value

    # Dead-letter queues first: redrive policies refer to them.
    order = sorted(resources.items(), key=lambda kv: "RedrivePolicy" in kv[1].get("Properties", {}))
    for name, res in order:
        props = res.get("Properties", {})
        kind = res["Type"]
        if kind == "AWS::DynamoDB::Table":
            table = f"{prefix}-{name}"
            args = {
                "TableName": table,
                "AttributeDefinitions": props["AttributeDefinitions"],
                "KeySchema": props["KeySchema"],
                "BillingMode": props.get("BillingMode", "PAY_PER_REQUEST"),
            }
            if props.get("GlobalSecondaryIndexes"):
                args["GlobalSecondaryIndexes"] = props["GlobalSecondaryIndexes"]
            desc = ddb.create_table(**args)["TableDescription"]
            if props.get("TimeToLiveSpecification"):
                # The retention policy's and the rate limiter's expires_at (tests read it back).
                ddb.update_time_to_live(TableName=table, TimeToLiveSpecification=props["TimeToLiveSpecification"])
            refs[name], arns[name] = table, desc["TableArn"]
        elif kind == "AWS::SQS::Queue":
            fifo = bool(props.get("FifoQueue"))
            queue = f"{prefix}-{name}" + (".fifo" if fifo else "")
            attrs = {}
            for key in ["VisibilityTimeout", "MessageRetentionPeriod", "DelaySeconds"]:
                if key in props:
                    attrs[key] = str(props[key])
            if fifo:
                attrs["FifoQueue"] = "true"
                attrs["ContentBasedDeduplication"] = str(bool(props.get("ContentBasedDeduplication"))).lower()
            if "RedrivePolicy" in props:
                attrs["RedrivePolicy"] = json.dumps(resolve(props["RedrivePolicy"]))
            url = sqs.create_queue(QueueName=queue, Attributes=attrs)["QueueUrl"]
            arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
            refs[name], arns[name] = url, arn
        elif kind == "AWS::SecretsManager::Secret":
            secret = sm.create_secret(Name=f"{prefix}-{name}", SecretString=props.get("SecretString", ""))
            refs[name], arns[name] = secret["ARN"], secret["ARN"]

    env = template["Globals"]["Function"]["Environment"]["Variables"]
    out = {}
    for key, value in env.items():
        if isinstance(value, Tag) and value.tag == "Ref" and value.value not in refs:
            continue  # a parameter (e.g. LogLevel), not a resource
        if isinstance(value, Tag) and value.tag == "Sub" and isinstance(value.value, str):
            # The stack's name is the prefix here (METRICS_NAMESPACE: Pricing/<stack>).
            out[key] = value.value.replace("${AWS::StackName}", prefix)
            continue
        out[key] = resolve(value)
    return out


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("provision")
    p.add_argument("--endpoint", required=True)
    p.add_argument("--prefix", required=True)
    args = parser.parse_args()
    if args.command == "provision":
        json.dump(provision(args.endpoint, args.prefix), sys.stdout)
        sys.stdout.write("\n")


if __name__ == "__main__":
    main()

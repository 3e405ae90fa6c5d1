"""`regroup topics create | describe | grow | delete`: regroup's topic registry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from regroup.cli.exits import OK, REFUSED
from regroup.cli.options import Session, common
from regroup.cli.output import emit_json, error_json, error_name, line, show, table, warn
from regroup.v1 import admin_pb2, common_pb2


@click.group()
def topics() -> None:
    """Create, describe, grow and delete topics (the partitions groups share)."""


def _racks(values: tuple[str, ...]) -> list[str]:
    """--racks a,b --racks c is a, b, c: one rack per partition, in partition order."""
    return [rack for value in values for rack in value.split(",") if rack]


def _report(
    session: Session,
    results: Any,
    done: Callable[[Any], str],
    extra: Callable[[Any], dict[str, Any]] = lambda r: {},
) -> int:
    """Prints per-topic results (done: what a success says); exit code 2 if any was refused."""
    failed = [r for r in results if r.error_code != common_pb2.NONE]
    if session.as_json:
        emit_json(
            {
                "topics": [
                    {
                        "name": r.name,
                        "topic_id": r.topic_id or None,
                        # 0 when the answer does not tell (refused, or already there): null.
                        "num_partitions": getattr(r, "num_partitions", 0) or None,
                        "error": error_json(r.error_code, r.error_message),
                        **extra(r),
                    }
                    for r in results
                ]
            }
        )
    else:
        for r in results:
            if r.error_code == common_pb2.NONE:
                line(done(r))
    for r in failed:
        warn(f"topic {r.name}: {error_name(r.error_code)}: {r.error_message}")
    return REFUSED if failed else OK


@topics.command()
@common
@click.argument("name")
@click.option("--partitions", "-p", type=click.IntRange(min=1), required=True, help="How many partitions.")
@click.option(
    "--racks",
    multiple=True,
    metavar="RACK,...",
    help="The rack of each partition, in order (comma-separated).",
)
@click.option("--if-not-exists", is_flag=True, help="A topic of that name already there is not an error.")
def create(session: Session, name: str, partitions: int, racks: tuple[str, ...], if_not_exists: bool) -> int:
    """Create a topic. Groups whose subscriptions match it are rebalanced.

    \b
    Examples:
      regroup topics create orders --partitions 12
      regroup topics create events -p 3 --racks eu-1a,eu-1b,eu-1c --if-not-exists
    """
    topic = admin_pb2.CreatableTopic(name=name, num_partitions=partitions, partition_racks=_racks(racks))
    with session.connect() as conn:
        response = conn.admin("CreateTopics", admin_pb2.CreateTopicsRequest(topics=[topic]))
    results = list(response.topics)
    existed = set()
    for r in results:
        if if_not_exists and r.error_code == common_pb2.TOPIC_ALREADY_EXISTS:
            existed.add(r.name)
            r.error_code, r.error_message = common_pb2.NONE, ""

    def done(r: Any) -> str:
        if r.name in existed:
            return f"Topic {r.name} already exists."
        return f"Created topic {r.name} ({r.topic_id}) with {r.num_partitions} partitions."

    return _report(session, results, done, lambda r: {"created": r.name not in existed})


@topics.command()
@common
@click.argument("names", metavar="[NAME...]", nargs=-1)
def describe(session: Session, names: tuple[str, ...]) -> int:
    """Describe the named topics, or every topic.

    \b
    Examples:
      regroup topics describe
      regroup topics describe orders --json
    """
    request = admin_pb2.DescribeTopicsRequest(names=names)
    with session.connect() as conn:
        found = conn.pages("DescribeTopics", request, lambda r: r.topics)
    failed = [t for t in found if t.error_code != common_pb2.NONE]
    if session.as_json:
        emit_json(
            {
                "topics": [
                    {
                        "name": t.name,
                        "topic_id": t.topic_id or None,
                        "num_partitions": t.num_partitions if t.error_code == common_pb2.NONE else None,
                        "partition_racks": list(t.partition_racks),
                        "error": error_json(t.error_code, t.error_message),
                    }
                    for t in found
                ]
            }
        )
    else:
        rows = [
            (t.name, t.topic_id, t.num_partitions, ",".join(t.partition_racks))
            for t in found
            if t.error_code == common_pb2.NONE
        ]
        show(table(("TOPIC", "TOPIC-ID", "PARTITIONS", "RACKS"), rows))
    for t in failed:
        warn(f"topic {t.name}: {error_name(t.error_code)}: {t.error_message}")
    return REFUSED if failed else OK


@topics.command()
@common
@click.argument("name")
@click.option(
    "--partitions",
    "-p",
    type=click.IntRange(min=1),
    required=True,
    help="The new total, above the current one.",
)
@click.option("--racks", multiple=True, metavar="RACK,...", help="The rack of each new partition, in order.")
def grow(session: Session, name: str, partitions: int, racks: tuple[str, ...]) -> int:
    """Grow a topic to more partitions. Subscribed groups are rebalanced.

    \b
    Examples:
      regroup topics grow orders --partitions 24
    """
    topic = admin_pb2.CreatePartitionsRequest.Topic(
        name=name, count=partitions, new_partition_racks=_racks(racks)
    )
    with session.connect() as conn:
        response = conn.admin("CreatePartitions", admin_pb2.CreatePartitionsRequest(topics=[topic]))
    return _report(
        session, list(response.topics), lambda r: f"Topic {r.name} has {r.num_partitions} partitions."
    )


@topics.command()
@common
@click.argument("names", metavar="NAME...", nargs=-1, required=True)
def delete(session: Session, names: tuple[str, ...]) -> int:
    """Delete topics. Subscribed groups are rebalanced without them.

    \b
    Examples:
      regroup topics delete old-orders
    """
    with session.connect() as conn:
        response = conn.admin("DeleteTopics", admin_pb2.DeleteTopicsRequest(names=names))
    return _report(session, list(response.topics), lambda r: f"Deleted topic {r.name}.")

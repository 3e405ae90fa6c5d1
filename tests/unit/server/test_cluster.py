"""`python -m regroup.server cluster`: the replicas' names, addresses and environment
(tests/integration/test_cluster.py runs the launcher itself)."""

from __future__ import annotations

import argparse

from regroup.server.cluster import ReplicaSpec, replica_environment, replica_specs
from regroup.server.config import add_arguments, flag_environment, load_settings


def test_replicas_take_consecutive_ports_from_the_listen_address() -> None:
    assert replica_specs("127.0.0.1:50051", 3) == [
        ReplicaSpec("replica-1", "127.0.0.1:50051"),
        ReplicaSpec("replica-2", "127.0.0.1:50052"),
        ReplicaSpec("replica-3", "127.0.0.1:50053"),
    ]
    assert replica_specs("[::1]:7000", 1) == [ReplicaSpec("replica-1", "[::1]:7000")]


def test_replicas_take_consecutive_metrics_ports_unless_off_or_any() -> None:
    specs = replica_specs("127.0.0.1:50051", 3, "127.0.0.1:9464")
    assert [s.metrics_listen for s in specs] == ["127.0.0.1:9464", "127.0.0.1:9465", "127.0.0.1:9466"]
    assert replica_environment({}, specs[1], "postgresql://db")["REGROUP_METRICS_LISTEN"] == "127.0.0.1:9465"
    for shared in ("off", "127.0.0.1:0"):
        assert {s.metrics_listen for s in replica_specs("127.0.0.1:50051", 3, shared)} == {shared}


def test_each_replica_gets_the_shared_database_and_its_own_name_and_address() -> None:
    base = {
        "REGROUP_LEASE_MS": "3000",
        "REGROUP_REPLICA_ID": "mine",
        "REGROUP_ADVERTISED_ADDRESS": "lb:1",
        "DATABASE_URL": "postgresql://old",
    }
    env = replica_environment(base, ReplicaSpec("replica-2", "127.0.0.1:50052"), "postgresql://db")
    assert env["DATABASE_URL"] == "postgresql://db"
    assert (env["REGROUP_LISTEN"], env["REGROUP_REPLICA_ID"]) == ("127.0.0.1:50052", "replica-2")
    # Each advertises its own listen address; every other setting reaches all alike.
    assert "REGROUP_ADVERTISED_ADDRESS" not in env
    assert env["REGROUP_LEASE_MS"] == "3000"
    settings = load_settings(env)
    assert (settings.replica_id, settings.lease_ms) == ("replica-2", 3000)


def test_the_launchers_flags_reach_the_replicas_as_environment_variables() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--lease-ms", "2000", "--heartbeat-interval-ms", "500"])
    flags = flag_environment(args)
    assert flags == {"REGROUP_LEASE_MS": "2000", "REGROUP_HEARTBEAT_INTERVAL_MS": "500"}
    assert load_settings(flags) == load_settings({}, args)

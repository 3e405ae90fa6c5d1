"""The synchronous twins take their signatures from the async methods, so they cannot drift."""

from __future__ import annotations

import inspect

import pytest

from regroup.client import GroupMember
from regroup.client.connect import ConnectWorker
from regroup.client.sync import SyncConnectWorker, SyncGroupMember


@pytest.mark.parametrize(
    ("twin", "original"),
    [
        (SyncGroupMember.join, GroupMember.join),
        (SyncGroupMember.commit, GroupMember.commit),
        (SyncGroupMember.committed, GroupMember.committed),
        (SyncConnectWorker.join, ConnectWorker.join),
    ],
)
def test_a_twin_has_the_async_methods_signature_and_docs(twin: object, original: object) -> None:
    assert inspect.signature(twin) == inspect.signature(original)  # type: ignore[arg-type]
    assert twin.__doc__ == original.__doc__


def test_sync_join_takes_client_side_assignors() -> None:
    # It did not before the twins were derived: SyncGroupMember.join lacked the parameter.
    assert "client_assignors" in inspect.signature(SyncGroupMember.join).parameters

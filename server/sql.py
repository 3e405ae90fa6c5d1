"""Every SQL statement the Postgres store runs, by name, in one place.

Statements take positional arguments ($1, ...) in the order their comment or
column list gives; `store.py` builds the rows. The schema is in migrations/.
"""

from __future__ import annotations

# -- groups and their rows (one operation's records, in one transaction) --------

UPSERT_GROUP = """
INSERT INTO groups AS g (group_id, group_type, group_epoch, metadata_hash, assignment_epoch,
                         assignor_state, assignment_error, owner, owner_epoch)
VALUES ($1, COALESCE($2::text, 'consumer'), COALESCE($3::int, 0), COALESCE($4::bigint, 0),
        COALESCE($5::int, 0), COALESCE($6::bytea, ''), COALESCE($7::text, ''), $8, $9)
ON CONFLICT (group_id) DO UPDATE SET
    group_type = COALESCE($2::text, g.group_type),
    group_epoch = COALESCE($3::int, g.group_epoch),
    metadata_hash = COALESCE($4::bigint, g.metadata_hash),
    assignment_epoch = COALESCE($5::int, g.assignment_epoch),
    assignor_state = COALESCE($6::bytea, g.assignor_state),
    assignment_error = COALESCE($7::text, g.assignment_error),
    owner = $8, owner_epoch = $9,
    updated_at = now()
"""

UPSERT_MEMBER = """
INSERT INTO members (group_id, member_id, instance_id, rack_id, client_id, client_host,
                     subscribed_topic_names, subscribed_topic_regex, server_assignor, rebalance_timeout_ms,
                     client_assignors, url, draining, capacity, replicas, require_co_partitioning)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::jsonb, $12, $13, $14, $15, $16)
ON CONFLICT (group_id, member_id) DO UPDATE SET
    instance_id = EXCLUDED.instance_id, rack_id = EXCLUDED.rack_id, client_id = EXCLUDED.client_id,
    client_host = EXCLUDED.client_host, subscribed_topic_names = EXCLUDED.subscribed_topic_names,
    subscribed_topic_regex = EXCLUDED.subscribed_topic_regex, server_assignor = EXCLUDED.server_assignor,
    rebalance_timeout_ms = EXCLUDED.rebalance_timeout_ms, client_assignors = EXCLUDED.client_assignors,
    url = EXCLUDED.url, draining = EXCLUDED.draining, capacity = EXCLUDED.capacity,
    replicas = EXCLUDED.replicas, require_co_partitioning = EXCLUDED.require_co_partitioning
"""

UPSERT_OFFSET = """
INSERT INTO offsets (group_id, topic_id, partition, "offset", metadata, member_epoch, commit_ms)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (group_id, topic_id, partition) DO UPDATE SET
    "offset" = EXCLUDED."offset", metadata = EXCLUDED.metadata,
    member_epoch = EXCLUDED.member_epoch, commit_ms = EXCLUDED.commit_ms
"""

UPSERT_TARGET = """
INSERT INTO target_assignments (group_id, member_id, partitions) VALUES ($1, $2, $3::jsonb)
ON CONFLICT (group_id, member_id) DO UPDATE SET partitions = EXCLUDED.partitions
"""

UPSERT_CURRENT = """
INSERT INTO current_assignments (group_id, member_id, state, member_epoch, previous_member_epoch,
                                 assigned, pending_revocation)
VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7::jsonb)
ON CONFLICT (group_id, member_id) DO UPDATE SET
    state = EXCLUDED.state, member_epoch = EXCLUDED.member_epoch,
    previous_member_epoch = EXCLUDED.previous_member_epoch,
    assigned = EXCLUDED.assigned, pending_revocation = EXCLUDED.pending_revocation
"""


#: UPSERT_CURRENT in one statement with the shard fence ($8 shard, $9 replica id, $10 owner
#: epoch): the most frequent write (one member's reconciliation step) without a transaction
#: of its own. The CTE locks the shard's lease FOR SHARE, so a replica taking the shard over
#: waits for the write, and a write from a replica that lost the shard (or whose lease
#: expired by the database's clock), or for a group not stored, inserts nothing ("INSERT 0 0").
def _insert_events(first: int, where: str = "") -> str:
    """Inserts the events given as five arrays from parameter $`first` on (at_ms, event_type,
    group_epoch, member_id, detail), in their order, for group $1."""
    a, b, c, d, e = (f"${first + i}" for i in range(5))
    return f"""
INSERT INTO group_events (group_id, at_ms, event_type, group_epoch, member_id, detail)
SELECT $1, e.at_ms, e.event_type, e.group_epoch, e.member_id, e.detail
FROM unnest({a}::bigint[], {b}::smallint[], {c}::int[], {d}::text[], {e}::jsonb[])
     WITH ORDINALITY AS e(at_ms, event_type, group_epoch, member_id, detail, ord)
{where}
ORDER BY e.ord"""


_OWNED = """
owned AS (
    SELECT 1 FROM shard_leases l JOIN groups g ON g.group_id = $1
    WHERE l.shard = $8 AND l.owner = $9 AND l.owner_epoch = $10 AND l.expires_at > clock_timestamp()
    FOR SHARE OF l
)"""

_STEP = """
INSERT INTO current_assignments (group_id, member_id, state, member_epoch, previous_member_epoch,
                                 assigned, pending_revocation)
SELECT $1, $2, $3, $4, $5, $6::jsonb, $7::jsonb FROM owned
ON CONFLICT (group_id, member_id) DO UPDATE SET
    state = EXCLUDED.state, member_epoch = EXCLUDED.member_epoch,
    previous_member_epoch = EXCLUDED.previous_member_epoch,
    assigned = EXCLUDED.assigned, pending_revocation = EXCLUDED.pending_revocation"""

GUARDED_UPSERT_CURRENT = f"WITH {_OWNED}{_STEP}\n"

#: Per member-keyed table: the rows of some members of a group ($1 group id, $2 member ids).
DELETE_MEMBER_ROWS = {
    table: f"DELETE FROM {table} WHERE group_id = $1 AND member_id = ANY($2::text[])"
    for table in ("members", "target_assignments", "current_assignments")
}

#: $1 group id, $2 topic ids, $3 partitions (pairwise).
DELETE_OFFSETS = (
    "DELETE FROM offsets o USING unnest($2::text[], $3::int[]) AS d(topic_id, partition)"
    " WHERE o.group_id = $1 AND o.topic_id = d.topic_id AND o.partition = d.partition"
)

DELETE_CONNECTORS = "DELETE FROM connectors WHERE group_id = $1"
INSERT_CONNECTOR = "INSERT INTO connectors (group_id, name, tasks) VALUES ($1, $2, $3)"

#: Members, assignments, offsets and connectors go with the group (ON DELETE CASCADE).
DELETE_GROUP = "DELETE FROM groups WHERE group_id = $1"

# -- the shard fence (every write for a group, in its transaction) ---------------

#: The lease of a group's shard ($1 shard), locked FOR SHARE until the transaction ends: a
#: takeover (which updates the row) waits for the write, and the write sees whether this
#: replica still holds the lease and whether it is live by the database's clock.
LOCK_SHARD_LEASE = """
SELECT owner, owner_epoch, expires_at > clock_timestamp() AS live FROM shard_leases WHERE shard = $1
FOR SHARE
"""
SHARD_LEASE = (
    "SELECT owner, owner_epoch, expires_at > clock_timestamp() AS live FROM shard_leases WHERE shard = $1"
)

PING = "SELECT 1"

# -- notices between replicas (LISTEN/NOTIFY; the payload is the sender's replica id) --

#: The topics changed: replicas reload them and refresh their groups that subscribe.
TOPICS_CHANNEL = "regroup_topics"
#: Shards were released: replicas run a lease round at once instead of at their next period.
LEASES_CHANNEL = "regroup_leases"
NOTIFY = "SELECT pg_notify($1, $2)"
#: Not a channel: what a store tells its listener when the listening connection was lost.
LISTEN_LOST = ""

# -- shards and leases (migrations/0005_shard_leases.sql) ---------------------

#: $1 replica id, $2 advertised address, $3 lease ms, $4/$5 shards to renew and the epochs
#: they are held at, $6 shards to release, $7 shards to acquire: one statement per period.
LEASE_ROUND = "SELECT regroup_lease_round($1, $2, $3, $4::int[], $5::bigint[], $6::int[], $7::int[])"
#: $1 the shard count a first start proposes; the stored one wins afterwards.
# The stored shard count, or $1 when none is stored yet. DO UPDATE (to the same value)
# rather than DO NOTHING plus a read: when replicas start together, one waits for the
# other's insert and then conflicts, and a read in the same statement could not see the
# row (its snapshot predates that commit) and returned nothing; DO UPDATE locks and returns
# the committed row.
SHARD_COUNT = """
INSERT INTO cluster_settings (key, value) VALUES ('shards', $1::text)
ON CONFLICT (key) DO UPDATE SET value = cluster_settings.value
RETURNING value
"""

# -- loading groups: every group, one ($1 group id), or some ($1 group ids) ------

GROUP_IDS = "SELECT group_id FROM groups"


def _loads(table: str, order: str) -> tuple[str, str, str]:
    return (
        f"SELECT * FROM {table} ORDER BY {order}",
        f"SELECT * FROM {table} WHERE group_id = $1 ORDER BY {order}",
        f"SELECT * FROM {table} WHERE group_id = ANY($1::text[]) ORDER BY {order}",
    )


LOAD_GROUPS = _loads("groups", "group_id")
LOAD_CONNECTORS = _loads("connectors", "group_id, name")
LOAD_MEMBERS = _loads("members", "group_id, member_id")
LOAD_TARGET_ASSIGNMENTS = _loads("target_assignments", "group_id, member_id")
LOAD_CURRENT_ASSIGNMENTS = _loads("current_assignments", "group_id, member_id")
LOAD_OFFSETS = _loads("offsets", "group_id, topic_id, partition")

# -- topics ---------------------------------------------------------------------

LOAD_TOPICS = "SELECT * FROM topics ORDER BY name"
#: $1 topic id, $2 name, $3 partition count, $4 partition racks.
UPSERT_TOPIC = """
INSERT INTO topics (topic_id, name, num_partitions, partition_racks) VALUES ($1, $2, $3, $4)
ON CONFLICT (topic_id) DO UPDATE SET num_partitions = EXCLUDED.num_partitions,
    partition_racks = EXCLUDED.partition_racks, updated_at = now()
"""
DELETE_TOPIC = "DELETE FROM topics WHERE topic_id = $1"

# -- group history (migrations/0007_group_events.sql) ---------------------------

#: One operation's events ($1 group id, then arrays of at_ms, event_type, group_epoch,
#: member_id, detail), in their order; answers their sequences (ascending: identity values
#: are drawn in the order the SELECT produces the rows).
INSERT_EVENTS = f"{_insert_events(2)}\nRETURNING sequence\n"

#: Keeps a group's newest $2 events ($1 group id), along the (group_id, sequence) index.
TRIM_GROUP_EVENTS = """
DELETE FROM group_events
WHERE group_id = $1 AND sequence < (
    SELECT sequence FROM group_events WHERE group_id = $1
    ORDER BY sequence DESC OFFSET $2 - 1 LIMIT 1
)
"""

#: Every group's events older than $1 (wall ms), along the at_ms index.
EXPIRE_EVENTS = "DELETE FROM group_events WHERE at_ms < $1"

#: A group's events ($1) in a range: sequence in ($2, $3) (0: unbounded), at_ms in [$4, $5)
#: (0: unbounded), of the types in $6 (empty: all); store.py appends the order and limit.
SELECT_EVENTS = """
SELECT sequence, at_ms, event_type, group_epoch, member_id, detail FROM group_events
WHERE group_id = $1
  AND ($2::bigint = 0 OR sequence > $2) AND ($3::bigint = 0 OR sequence < $3)
  AND ($4::bigint = 0 OR at_ms >= $4) AND ($5::bigint = 0 OR at_ms < $5)
  AND (cardinality($6::smallint[]) = 0 OR event_type = ANY ($6))
"""

#: GUARDED_UPSERT_CURRENT with the step's events (a member that reached the target, the group
#: Stable), still one statement: $11..$15 are INSERT_EVENTS' arrays. The events are inserted
#: only when the fenced upsert wrote its row; answers that (written) and their sequences.
GUARDED_UPSERT_CURRENT_WITH_EVENTS = f"""
WITH {_OWNED}, step AS ({_STEP}
    RETURNING 1
), events AS ({_insert_events(11, "WHERE EXISTS (SELECT 1 FROM step)")}
    RETURNING sequence
)
SELECT EXISTS (SELECT 1 FROM step) AS written,
       ARRAY(SELECT sequence FROM events ORDER BY sequence) AS sequences
"""

-- regroup's initial schema: the topic registry and consumer groups.
--
-- Tables mirror the engine's records (Kafka's ConsumerGroup* records):
--   groups               GroupMetadataRecord + TargetAssignmentEpochRecord
--   members              MemberMetadataRecord
--   target_assignments   TargetAssignmentMemberRecord
--   current_assignments  CurrentAssignmentRecord
-- Group state (Empty/Assigning/Reconciling/Stable) is derived, never stored.
-- Assignments are JSON objects {"<topic id>": [partition, ...]}.

CREATE TABLE topics (
    topic_id        uuid PRIMARY KEY,
    name            text NOT NULL UNIQUE,
    num_partitions  integer NOT NULL CHECK (num_partitions > 0),
    -- One rack per partition, or empty when racks are unknown.
    partition_racks text[] NOT NULL DEFAULT '{}',
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

-- Each replica draws an owner epoch when it starts; a group row names the
-- replica that owns it and the epoch at which it took it, so a replica that
-- lost ownership is fenced (its writes find a different owner epoch).
CREATE SEQUENCE owner_epochs;

CREATE TABLE groups (
    group_id          text PRIMARY KEY,
    group_type        text NOT NULL,
    group_epoch       integer NOT NULL,
    assignment_epoch  integer NOT NULL DEFAULT 0,
    metadata_hash     bigint NOT NULL DEFAULT 0,
    owner             text NOT NULL,
    owner_epoch       bigint NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE members (
    group_id               text NOT NULL REFERENCES groups (group_id) ON DELETE CASCADE,
    member_id              text NOT NULL,
    instance_id            text,
    rack_id                text,
    client_id              text NOT NULL DEFAULT '',
    client_host            text NOT NULL DEFAULT '',
    subscribed_topic_names text[] NOT NULL DEFAULT '{}',
    subscribed_topic_regex text,
    server_assignor        text,
    rebalance_timeout_ms   integer NOT NULL,
    PRIMARY KEY (group_id, member_id)
);

CREATE TABLE target_assignments (
    group_id   text NOT NULL REFERENCES groups (group_id) ON DELETE CASCADE,
    member_id  text NOT NULL,
    partitions jsonb NOT NULL,
    PRIMARY KEY (group_id, member_id)
);

CREATE TABLE current_assignments (
    group_id              text NOT NULL REFERENCES groups (group_id) ON DELETE CASCADE,
    member_id             text NOT NULL,
    state                 smallint NOT NULL,
    member_epoch          integer NOT NULL,
    previous_member_epoch integer NOT NULL,
    assigned              jsonb NOT NULL,
    pending_revocation    jsonb NOT NULL,
    PRIMARY KEY (group_id, member_id)
);

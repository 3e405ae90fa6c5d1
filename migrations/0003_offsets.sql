-- Committed offsets (Kafka's OffsetCommit records), removed with their group.
CREATE TABLE offsets (
    group_id      text NOT NULL REFERENCES groups (group_id) ON DELETE CASCADE,
    topic_id      text NOT NULL,
    partition     integer NOT NULL,
    "offset"      bigint NOT NULL,
    metadata      text NOT NULL DEFAULT '',
    -- The committing member's epoch, -1 for an admin commit.
    member_epoch  integer NOT NULL,
    commit_ms     bigint NOT NULL,
    PRIMARY KEY (group_id, topic_id, partition)
);

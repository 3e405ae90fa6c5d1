-- Assignment beyond balance (issue 24): a member's weight, the copies it asks for, and
-- whether it needs its topics co-partitioned. Part of the member's metadata
-- (MemberMetadataRecord), sent in its heartbeats; a change of capacity or replicas (or
-- rack) bumps the group epoch, as a subscription change does.
--
--   members.capacity                 the uniform assignor's weight, 1..1000
--   members.replicas                 copies of each partition, 1..16 (the group takes the largest)
--   members.require_co_partitioning  refuse a subscription the range assignor cannot co-partition

ALTER TABLE members ADD COLUMN capacity integer NOT NULL DEFAULT 1;
ALTER TABLE members ADD COLUMN replicas integer NOT NULL DEFAULT 1;
ALTER TABLE members ADD COLUMN require_co_partitioning boolean NOT NULL DEFAULT false;

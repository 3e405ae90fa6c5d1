-- Group history (issue 23): every change of a group, as an event with its reason, written in
-- the same transaction as the change (server/store.py append). Events outlive their group (a
-- deleted group's history still answers "why"), so there is no foreign key to groups.
--
--   sequence     increasing across all groups (an identity): ListGroupEvents pages by it
--   at_ms        wall-clock epoch ms of the operation that made the change
--   event_type   GroupEventType's number (proto/regroup/v1/admin.proto)
--   detail       the event's other fields (reason, message, member epoch, ...), zero ones left out
--
-- Retention, without scanning the table on every write: by count, each group's oldest events
-- beyond REGROUP_HISTORY_MAX_EVENTS are deleted along the (group_id, sequence) index, in a
-- write of the group once per tenth of that many events; by age, a periodic sweep deletes
-- along the at_ms index what is older than REGROUP_HISTORY_MAX_AGE_MS.
CREATE TABLE group_events (
    sequence     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    group_id     text NOT NULL,
    at_ms        bigint NOT NULL,
    event_type   smallint NOT NULL,
    group_epoch  integer NOT NULL,
    member_id    text NOT NULL DEFAULT '',
    detail       jsonb NOT NULL DEFAULT '{}'
);

CREATE INDEX group_events_by_group ON group_events (group_id, sequence);
CREATE INDEX group_events_by_age ON group_events (at_ms);

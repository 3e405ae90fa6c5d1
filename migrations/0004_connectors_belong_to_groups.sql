-- Connectors belong to their Connect group.
--
-- PutConnectors on a group that did not exist stored its connectors without a group
-- (DescribeGroups, ListGroups and DeleteGroups did not see it, and nothing removed
-- them). It now creates the group, Empty at epoch 0, and the connectors are a record
-- of the group: deleted with it.
--
-- Connectors left without a group become such a group (owned by whichever replica
-- claims the groups next). Connectors of a group that became a consumer group were
-- never used by it: they are dropped.

INSERT INTO groups (group_id, group_type, group_epoch, owner, owner_epoch)
SELECT DISTINCT c.group_id, 'connect', 0, '', 0
FROM connectors c
WHERE NOT EXISTS (SELECT 1 FROM groups g WHERE g.group_id = c.group_id);

DELETE FROM connectors c USING groups g WHERE g.group_id = c.group_id AND g.group_type <> 'connect';

ALTER TABLE connectors
    ADD CONSTRAINT connectors_group_id_fkey
    FOREIGN KEY (group_id) REFERENCES groups (group_id) ON DELETE CASCADE;

-- Client-side assignment and Connect groups.
--
--   members.client_assignors   the member's client-side assignors, in its order of
--                              preference: [{"name", "minimum_version", "maximum_version",
--                              "reason", "version", "metadata" (base64)}]
--   members.url                Connect workers: the worker URL
--   groups.assignor_state      what the last client-side installation left for the next
--   groups.assignment_error    the last client-side computation error ('' when none)
--   connectors                 a Connect group's connectors and task counts (PutConnectors);
--                              kept apart from groups so they can be set before any worker joins

ALTER TABLE members ADD COLUMN client_assignors jsonb NOT NULL DEFAULT '[]';
ALTER TABLE members ADD COLUMN url text NOT NULL DEFAULT '';
ALTER TABLE groups ADD COLUMN assignor_state bytea NOT NULL DEFAULT '';
ALTER TABLE groups ADD COLUMN assignment_error text NOT NULL DEFAULT '';

CREATE TABLE connectors (
    group_id   text NOT NULL,
    name       text NOT NULL,
    tasks      integer NOT NULL CHECK (tasks >= 0),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (group_id, name)
);

-- Topic changes reach every replica (issue 20). Each replica keeps the topics in memory
-- (loaded at its start) and refreshes its groups from them; a topic created, grown or
-- deleted through one replica must reach the others, or their groups never see it, and a
-- replica taking a group over would drop its partitions of a topic it does not know.
--
--   cluster_settings 'topics_version'  bumped by every statement that changes topics, in
--                                      its transaction: a replica that reads the new
--                                      version then finds the change in the topics table
--   regroup_lease_round()              the same round as in 0005, also answering
--                                      'topics_version': a replica reloads its topics
--                                      when it moved (server/leasekeeper.py)

INSERT INTO cluster_settings (key, value) VALUES ('topics_version', '0') ON CONFLICT (key) DO NOTHING;

CREATE FUNCTION regroup_topics_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE cluster_settings SET value = (value::bigint + 1)::text WHERE key = 'topics_version';
    RETURN NULL;
END;
$$;

CREATE TRIGGER topics_changed AFTER INSERT OR UPDATE OR DELETE ON topics
    FOR EACH STATEMENT EXECUTE FUNCTION regroup_topics_changed();

CREATE OR REPLACE FUNCTION regroup_lease_round(
    p_replica text,
    p_address text,
    p_lease_ms integer,
    p_renew_shards integer[],
    p_renew_epochs bigint[],
    p_release integer[],
    p_acquire integer[]
) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    -- clock_timestamp(), not now(): the transaction's start would make a lease look
    -- older than it is to whoever reads it later in a long transaction.
    t timestamptz := clock_timestamp();
    expiry timestamptz := t + make_interval(secs => p_lease_ms / 1000.0);
    renewed jsonb;
    acquired jsonb;
BEGIN
    INSERT INTO replicas (replica_id, address, expires_at) VALUES (p_replica, p_address, expiry)
    ON CONFLICT (replica_id) DO UPDATE SET address = EXCLUDED.address, expires_at = EXCLUDED.expires_at;

    DELETE FROM shard_leases WHERE owner = p_replica AND shard = ANY (p_release);

    WITH r AS (
        UPDATE shard_leases l SET expires_at = expiry
        FROM unnest(p_renew_shards, p_renew_epochs) AS r(shard, owner_epoch)
        WHERE l.shard = r.shard AND l.owner = p_replica AND l.owner_epoch = r.owner_epoch
          AND l.expires_at > t
        RETURNING l.shard, l.owner_epoch
    )
    SELECT coalesce(jsonb_object_agg(shard::text, owner_epoch), '{}') INTO renewed FROM r;

    -- Free shards only: absent, or expired by this clock. A live owner's lease is never taken.
    WITH a AS (
        INSERT INTO shard_leases AS l (shard, owner, owner_epoch, expires_at)
        SELECT a.shard, p_replica, nextval('owner_epochs'), expiry
        FROM (SELECT DISTINCT unnest(p_acquire)) AS a(shard)
        ON CONFLICT (shard) DO UPDATE
            SET owner = EXCLUDED.owner, owner_epoch = EXCLUDED.owner_epoch, expires_at = EXCLUDED.expires_at
            WHERE l.expires_at <= t
        RETURNING l.shard, l.owner_epoch
    )
    SELECT coalesce(jsonb_object_agg(shard::text, owner_epoch), '{}') INTO acquired FROM a;

    RETURN jsonb_build_object(
        'now_ms', floor(extract(epoch FROM t) * 1000)::bigint,
        'granted', renewed || acquired,
        'leases', (SELECT coalesce(jsonb_agg(jsonb_build_array(
                       shard, owner, owner_epoch, floor(extract(epoch FROM expires_at) * 1000)::bigint)
                       ORDER BY shard), '[]')
                   FROM shard_leases),
        'live', (SELECT coalesce(jsonb_agg(jsonb_build_array(replica_id, address) ORDER BY replica_id), '[]')
                 FROM replicas WHERE expires_at > t),
        'topics_version', (SELECT value::bigint FROM cluster_settings WHERE key = 'topics_version')
    );
END;
$$;

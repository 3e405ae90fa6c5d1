-- Shards and their leases (groups sharded over replicas; server/leases.py decides).
--
--   cluster_settings  settings fixed for the database's lifetime ('shards': the shard count,
--                     written once by the first start, see server/app.py)
--   replicas          the replicas alive: each renews its row with its leases
--   shard_leases      a shard's owner, its owner epoch (a fencing token from owner_epochs,
--                     which only grows) and the expiry, on the database's clock
--
-- regroup_lease_round() is a replica's whole renewal period in one statement: register
-- (with its advertised address), renew the leases it still holds at the epochs it holds
-- them, release the ones it gives up, acquire the ones it asks for that are free (never
-- leased, released, or expired by this database's clock), then read every lease, the
-- live replicas and the database's clock for its next plan.

CREATE TABLE cluster_settings (
    key   text PRIMARY KEY,
    value text NOT NULL
);

CREATE TABLE replicas (
    replica_id text PRIMARY KEY,
    address    text NOT NULL,
    expires_at timestamptz NOT NULL
);

CREATE TABLE shard_leases (
    shard       integer PRIMARY KEY CHECK (shard >= 0),
    owner       text NOT NULL,
    owner_epoch bigint NOT NULL,
    expires_at  timestamptz NOT NULL
);

CREATE FUNCTION regroup_lease_round(
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
                 FROM replicas WHERE expires_at > t)
    );
END;
$$;

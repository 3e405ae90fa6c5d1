-- Draining a member (issue 23, GroupAdmin.DrainMember).
--
--   members.draining   the member is out of service: the assignor gives it nothing, so it
--                      gives its partitions up through the usual revocation. Part of the
--                      member's metadata (MemberMetadataRecord), so it survives heartbeats,
--                      a static member's replacement and a reload; the drain state shown
--                      (DRAINING, DRAINED) is derived from it and what the member owns.

ALTER TABLE members ADD COLUMN draining boolean NOT NULL DEFAULT false;

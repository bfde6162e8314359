-- Claims on the notification outbox (issue 33, must-have 3 and 4): with several replicas on one
-- database every replica runs every channel's task, and without a claim two of them would take
-- the same row and the receiver would be told twice. A delivery first claims its channel's
-- oldest due row for its process (claimed_by, a replica id) until claim_expires_at (unix
-- milliseconds by the database's clock, never a replica's); the writes that finish it (delete
-- or retry, log, alert delivered) are made only while the row is still claimed by that process.
-- A claimer that died leaves its claim to expire, and another process delivers the row again:
-- at least once. See migrations/postgres/0007.
alter table notification_outbox add column claimed_by text;
alter table notification_outbox add column claim_expires_at integer;

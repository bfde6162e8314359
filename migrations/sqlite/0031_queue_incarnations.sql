-- When the queue a row describes began, as warren saw it (issue 34, case 6: a deleted and
-- re-created queue showed the old one's "907 replayed"). A queue that vanished from the listing
-- (`deleted_at` set) and came back under the same name reuses its row; this is then set to the
-- poll that found it back, and what warren counts per queue by name (custody's replayed records)
-- counts from here. Null: since `first_seen`, the queue was never seen gone.
alter table queues add column incarnation_since integer;

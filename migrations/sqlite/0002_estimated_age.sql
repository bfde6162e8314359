-- FIFO estimate of the oldest message's publish time, for queues the broker gives no age for.
-- Stored as a time (not an age), so an idle queue's row does not change from poll to poll.
-- est_bound = 1: the oldest message is older than this (warren's history starts there).
alter table queue_samples add column est_oldest_ts integer;
alter table queue_samples add column est_bound integer;

-- Claims on the notification outbox (issue 33, must-have 3 and 4); see migrations/sqlite/0029.
-- A claim is taken with `for update skip locked` on the channel's oldest row, and expires by
-- PostgreSQL's clock (clock_timestamp()), so replicas whose clocks disagree still agree on it.
alter table notification_outbox add column claimed_by text;
alter table notification_outbox add column claim_expires_at bigint; -- unix milliseconds

-- Which replica runs each action and holds each custody claim (issue 33, must-haves 3 and 4), so
-- that recovery (`dlq::recover_dead_replicas`) marks and hands back only a dead replica's: one
-- whose heartbeat lease (`replica:ID` in `leases`) ran out. Null on rows from before this
-- migration, whose process is gone: they count as a dead replica's.
alter table audit_log add column run_by text;
alter table custody_messages add column claimed_by text;
-- Recovery reads these every housekeeping round: a few rows, not the whole log or custody.
create index audit_log_unfinished on audit_log (id) where outcome in ('started', 'running');
create index custody_claimed on custody_messages (id) where state = 'claimed';

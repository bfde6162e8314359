-- Which replica runs each action and holds each custody claim; see migrations/sqlite/0030.
alter table audit_log add column run_by text;
alter table custody_messages add column claimed_by text;
create index audit_log_unfinished on audit_log (id) where outcome in ('started', 'running');
create index custody_claimed on custody_messages (id) where state = 'claimed';

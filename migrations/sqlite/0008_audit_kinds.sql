-- The audit log holds three kinds of entries, so its views can filter by kind and page through
-- all of them: broker actions (moves, deletes, purges), logins, and account changes (users and
-- API tokens).
--
-- Failed logins are aggregated: one row per client source, attempted name and minute, with the
-- number of attempts, how many of them the throttle refused, and the first (`at`) and latest
-- (`last_at`) attempt. Without it anyone who can reach the login form added a row per attempt
-- (520 in 1.7 s) and pushed real actions out of the views. `bucket` is that minute (unix
-- seconds / 60) and is set only on aggregated rows; the unique index is what the upsert meets.
alter table audit_log add column kind text not null default 'action'
    check (kind in ('action', 'login', 'account'));
alter table audit_log add column source text;       -- logins: the client address (IPv6: its /64 when aggregated)
alter table audit_log add column attempts integer not null default 1;
alter table audit_log add column throttled integer not null default 0;
alter table audit_log add column last_at integer;   -- aggregated rows: unix seconds of the latest attempt
alter table audit_log add column bucket integer;

update audit_log set kind = 'login', source = case when json_valid(request) then json_extract(request, '$.peer') end
    where action = 'login';
update audit_log set kind = 'account'
    where action in ('user add', 'user remove', 'user password', 'token add', 'token revoke');

create index audit_log_by_kind on audit_log (kind, id);
create unique index audit_log_failed_logins on audit_log (bucket, source, actor) where bucket is not null;

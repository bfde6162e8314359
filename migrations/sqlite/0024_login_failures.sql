-- Failed logins the throttle counts (auth::throttle), per key: `user:NAME` (or `user#HASH` for
-- a name too long to be one) and `addr:ADDRESS` (an IPv6 client's /64). In the database, not in
-- memory, so that a restart does not grant a fresh burst of guesses and replicas sharing a
-- database throttle together (issue 33, must-have 2). Rows older than the window are deleted by
-- each attempt.
create table login_failures (
    key text    not null,
    at  integer not null -- unix milliseconds
);
create index login_failures_by_key on login_failures (key, at);
create index login_failures_by_time on login_failures (at);

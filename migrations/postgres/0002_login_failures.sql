-- Failed logins the throttle counts (auth::throttle); see migrations/sqlite/0024. Each attempt
-- locks the table (share row exclusive) for its check and its count: otherwise replicas'
-- concurrent guesses would each pass the check before any was counted.
create table login_failures (
    key text   not null,
    at  bigint not null -- unix milliseconds
);
create index login_failures_by_key on login_failures (key, at);
create index login_failures_by_time on login_failures (at);

-- Every action that changes data on a broker, written before the action starts (outcome
-- 'started') and updated when it ends, so that an interrupted action still leaves a trace.
create table audit_log (
    id          integer primary key,
    at          integer not null,       -- unix seconds
    actor       text    not null,
    broker      text    not null,
    vhost       text    not null,
    queue       text    not null,
    action      text    not null,       -- requeue, move, ...
    request     text    not null,       -- the request as JSON
    outcome     text    not null,       -- started, done, partial, failed
    moved       integer not null default 0,
    failed      integer not null default 0,
    message_ids text    not null default '[]',
    detail      text
);
create index audit_log_at on audit_log (at);

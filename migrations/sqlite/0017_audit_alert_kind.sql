-- A fourth kind of audit entry, `alerts`: alert rules created, edited or deleted, silences set
-- or ended, and test notifications sent (and whether they were delivered), made through warren
-- by someone. One kind for the alerts page's settings, as `account` is for the access page's:
-- `action` says which (`rule add`, `silence end`, `test notification`, ...).
--
-- SQLite cannot change a CHECK constraint, so the table is rebuilt with every column, row
-- (ids kept) and index. `audit_messages` refers to `audit_log` with `on delete cascade`, and
-- foreign keys are on (`history::open`), so dropping `audit_log` first would delete every
-- message fate; it cannot be turned off inside the migration's transaction. The fates are
-- therefore set aside, their table dropped, and both tables rebuilt in order.
create table audit_messages_kept as select * from audit_messages;
drop table audit_messages;

create table audit_log_new (
    id          integer primary key,
    at          integer not null,       -- unix seconds
    actor       text    not null,
    broker      text    not null,
    vhost       text    not null,
    queue       text    not null,
    action      text    not null,       -- requeue, move, user add, rule edit, ...
    request     text    not null,       -- the request as JSON
    outcome     text    not null,       -- started, done, partial, failed
    moved       integer not null default 0,
    failed      integer not null default 0,
    message_ids text    not null default '[]',
    detail      text,
    kind        text    not null default 'action'
        check (kind in ('action', 'login', 'account', 'alerts')),
    source      text,
    attempts    integer not null default 1,
    throttled   integer not null default 0,
    last_at     integer,
    bucket      integer
);
insert into audit_log_new
    (id, at, actor, broker, vhost, queue, action, request, outcome, moved, failed, message_ids, detail,
     kind, source, attempts, throttled, last_at, bucket)
select id, at, actor, broker, vhost, queue, action, request, outcome, moved, failed, message_ids, detail,
     kind, source, attempts, throttled, last_at, bucket
from audit_log;
drop table audit_log;
alter table audit_log_new rename to audit_log;
create index audit_log_at on audit_log (at);
create index audit_log_by_kind on audit_log (kind, id);
create unique index audit_log_failed_logins on audit_log (bucket, source, actor) where bucket is not null;

create table audit_messages (
    audit_id    integer not null references audit_log (id) on delete cascade,
    position    integer not null,       -- in the snapshot for a selection, else in read order
    message_id  text,
    outcome     text    not null check (outcome in ('moved', 'failed', 'held', 'not_found')),
    detail      text    not null        -- where it went, or why not
);
insert into audit_messages (audit_id, position, message_id, outcome, detail)
select audit_id, position, message_id, outcome, detail from audit_messages_kept;
drop table audit_messages_kept;
create index audit_messages_by_action on audit_messages (audit_id, position);

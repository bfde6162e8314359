-- What became of every message a move touched, one row each: moved (and where), failed (and
-- why), held (kept in a holding queue instead of handed back to the broker's delivery limit) or
-- not found. Written at every checkpoint of a running move and with its end, so a failed or
-- interrupted move still says which messages it moved (issue 16, case 7: they recorded none).
-- `audit_log.message_ids` keeps the moved ids as before, for the log's pages.
create table audit_messages (
    audit_id    integer not null references audit_log (id) on delete cascade,
    position    integer not null,       -- in the snapshot for a selection, else in read order
    message_id  text,
    outcome     text    not null check (outcome in ('moved', 'failed', 'held', 'not_found')),
    detail      text    not null        -- where it went, or why not
);
create index audit_messages_by_action on audit_messages (audit_id, position);

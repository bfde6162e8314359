-- Dead letters in warren's custody (issue 18): taken off a DLQ by intake, which acks each
-- delivery only after its row is committed (with synchronous = FULL). The copy keeps what a
-- replay needs to publish it again unchanged: the AMQP-encoded properties (header types
-- included) and the body; the columns beside them are what triage filters and groups by.
create table custody_messages (
    id              integer primary key,
    broker          text    not null,
    vhost           text    not null,
    queue           text    not null,
    received_at     integer not null,      -- unix seconds
    exchange        text    not null,      -- as delivered from the DLQ
    routing_key     text    not null,
    properties      blob    not null,      -- AMQP content-header properties, encoded
    properties_json text    not null,      -- the same as the browser shows them
    body            blob    not null,
    size            integer not null,      -- bytes of body and properties, for the budget
    message_id      text,
    reason          text,
    original_queue  text,
    error           text,                  -- `Type: message`, as a framework recorded it
    redelivered     integer not null,      -- 1: the broker had delivered it before (a possible duplicate)
    state           text    not null default 'held' check (state in ('held', 'claimed', 'replayed')),
    job             text,                  -- the replay that claimed it
    replayed_at     integer,
    replayed_to     text
);
create index custody_by_queue on custody_messages (broker, vhost, queue, state, id);
-- Counts, sizes and the triage groups read this index alone, never the rows with their bodies
-- (a scan of 100,000 rows of 1 KiB took 600 ms).
create index custody_triage on custody_messages (broker, vhost, queue, state, reason, original_queue, error, size);

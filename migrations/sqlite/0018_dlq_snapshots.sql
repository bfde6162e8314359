-- The dead-letter browser's last snapshot of each queue, so that it survives a restart (issue 19,
-- item 10): taking one reads the queue, and every read of a quorum queue costs each message a
-- delivery (DOMAIN.md §5), so a snapshot is not thrown away lightly. The messages are kept as
-- read (payloads cut at 64 KiB, as in memory); warren keeps dead letters in its database for
-- custody already. Replaced by the next snapshot of the queue.
create table dlq_snapshots (
    broker         text    not null,
    vhost          text    not null,
    queue          text    not null,
    taken_at       integer not null, -- unix milliseconds
    queue_type     text    not null,
    delivery_limit integer,
    requested      integer not null,
    note           text,
    -- Set once a move or purge of the queue ran after it was taken: what ran, and when.
    outdated       text,
    messages       text    not null, -- JSON array of {fingerprint, held_in, message}
    primary key (broker, vhost, queue)
) without rowid;

-- Brokers as configured; the name is the stable key, the id keeps rows small.
create table brokers (
    id   integer primary key,
    name text not null unique
);

-- Every queue warren has seen. A queue that disappears keeps its row (and its history) with
-- deleted_at set; if it comes back under the same name the row is reused and deleted_at cleared.
create table queues (
    id          integer primary key,
    broker_id   integer not null references brokers (id),
    vhost       text    not null,
    name        text    not null,
    kind        text    not null,
    durable     integer,
    arguments   text    not null default '{}',
    policy      text,
    effective_policy text not null default '{}',
    first_seen  integer not null,
    deleted_at  integer,
    unique (broker_id, vhost, name)
);

-- Per-queue samples, written only when a value changed since the queue's last written sample
-- (plus an hourly keyframe): an idle queue costs next to nothing. A value holds until the next
-- row, as long as the broker was polled successfully (see broker_samples).
-- Rates are stored in milli-messages per second as integers (SQLite stores small integers in
-- 1-3 bytes, a REAL always in 8). NULL means the broker gave no number.
create table queue_samples (
    queue_id        integer not null,
    ts              integer not null, -- unix seconds
    ready           integer,
    unacked         integer,
    consumers       integer,
    publish_count   integer,          -- cumulative; the oldest-age estimate reads it
    publish_rate_m  integer,
    deliver_rate_m  integer,
    ack_rate_m      integer,
    redeliver_rate_m integer,
    head_ts         integer,          -- head_message_timestamp, unix seconds
    primary key (queue_id, ts)
) without rowid;

-- One row per successful poll of a broker: broker-wide rates and totals, and the proof that
-- the broker was reachable at ts (gaps in this table are gaps in every chart).
create table broker_samples (
    broker_id         integer not null,
    ts                integer not null,
    ready             integer,
    unacked           integer,
    consumers         integer,
    queues            integer,
    publish_rate_m    integer,
    confirm_rate_m    integer,
    ack_rate_m        integer,
    deliver_rate_m    integer,
    redeliver_rate_m  integer,
    unroutable_rate_m integer,
    poll_ms           integer not null,
    primary key (broker_id, ts)
) without rowid;

-- Roll-ups of the history: 1-minute and 1-hour aggregates, so a 30-day chart reads 720 rows
-- instead of 259,200 polls, and raw samples can be pruned after a short window.
--
-- Aggregates are over the broker's successful polls in the bucket (broker_samples): at each poll
-- a queue's value is the one in force (its latest queue_samples row), so a value holds until the
-- next row but never across a gap where the broker was not polled. `samples` counts the polls at
-- which the queue had values; a bucket only partly covered by data has fewer samples than polls
-- (compare with the broker roll-up's `samples`). Each aggregate is over the polls where that
-- value was known: NULL when it was unknown at every one, never 0.
--
-- Which aggregates: depths and consumers min, max, avg, last; rates avg, max, last (a minimum
-- rate is almost always 0 and says little); the oldest-message age its maximum (how old
-- messages got); the publish counter and the raw columns that define the age only their last
-- value (they carry the value in force into the next bucket). Averages are stored in
-- milli-units as integers (SQLite stores a small integer in 1-3 bytes, a REAL always in 8).
--
-- Change-only, like queue_samples: a queue's row is written only when it differs from what the
-- previous row implies (its last values held for the whole bucket, one sample per broker poll).
-- An idle queue therefore costs no roll-up rows at all; a reader derives its buckets from the
-- previous row and the broker roll-up.
create table queue_rollups_1m (
    queue_id          integer not null,
    bucket            integer not null, -- unix seconds at the start of the minute
    samples           integer not null,
    ready_min         integer,
    ready_max         integer,
    ready_avg_m       integer,
    unacked_min       integer,
    unacked_max       integer,
    unacked_avg_m     integer,
    consumers_min     integer,
    consumers_max     integer,
    consumers_avg_m   integer,
    publish_rate_avg_m   integer,
    publish_rate_max_m   integer,
    deliver_rate_avg_m   integer,
    deliver_rate_max_m   integer,
    ack_rate_avg_m       integer,
    ack_rate_max_m       integer,
    redeliver_rate_avg_m integer,
    redeliver_rate_max_m integer,
    age_max_secs      integer,
    -- The values in force at the bucket's last poll (the queue_samples columns).
    ready             integer,
    unacked           integer,
    consumers         integer,
    publish_count     integer,
    publish_rate_m    integer,
    deliver_rate_m    integer,
    ack_rate_m        integer,
    redeliver_rate_m  integer,
    head_ts           integer,
    est_oldest_ts     integer,
    est_bound         integer,
    primary key (queue_id, bucket)
) without rowid;

create table queue_rollups_1h (
    queue_id          integer not null,
    bucket            integer not null, -- unix seconds at the start of the hour
    samples           integer not null,
    ready_min         integer,
    ready_max         integer,
    ready_avg_m       integer,
    unacked_min       integer,
    unacked_max       integer,
    unacked_avg_m     integer,
    consumers_min     integer,
    consumers_max     integer,
    consumers_avg_m   integer,
    publish_rate_avg_m   integer,
    publish_rate_max_m   integer,
    deliver_rate_avg_m   integer,
    deliver_rate_max_m   integer,
    ack_rate_avg_m       integer,
    ack_rate_max_m       integer,
    redeliver_rate_avg_m integer,
    redeliver_rate_max_m integer,
    age_max_secs      integer,
    ready             integer,
    unacked           integer,
    consumers         integer,
    publish_count     integer,
    publish_rate_m    integer,
    deliver_rate_m    integer,
    ack_rate_m        integer,
    redeliver_rate_m  integer,
    head_ts           integer,
    est_oldest_ts     integer,
    est_bound         integer,
    primary key (queue_id, bucket)
) without rowid;

-- Broker-wide roll-ups: one row per bucket with at least one successful poll (a missing bucket
-- is a gap). `samples` is the number of successful polls, `last_ts` the time of the last one.
-- One row per broker per bucket, so averages are plain REALs here.
create table broker_rollups_1m (
    broker_id         integer not null,
    bucket            integer not null,
    samples           integer not null,
    last_ts           integer not null,
    ready_avg         real,
    ready_max         integer,
    unacked_avg       real,
    unacked_max       integer,
    consumers_avg     real,
    queues_last       integer,
    publish_rate_avg_m    real,
    confirm_rate_avg_m    real,
    ack_rate_avg_m        real,
    deliver_rate_avg_m    real,
    redeliver_rate_avg_m  real,
    unroutable_rate_avg_m real,
    poll_ms_avg       real,
    poll_ms_max       integer,
    primary key (broker_id, bucket)
) without rowid;

create table broker_rollups_1h (
    broker_id         integer not null,
    bucket            integer not null,
    samples           integer not null,
    last_ts           integer not null,
    ready_avg         real,
    ready_max         integer,
    unacked_avg       real,
    unacked_max       integer,
    consumers_avg     real,
    queues_last       integer,
    publish_rate_avg_m    real,
    confirm_rate_avg_m    real,
    ack_rate_avg_m        real,
    deliver_rate_avg_m    real,
    redeliver_rate_avg_m  real,
    unroutable_rate_avg_m real,
    poll_ms_avg       real,
    poll_ms_max       integer,
    primary key (broker_id, bucket)
) without rowid;

-- How far each broker's history is rolled up: every bucket before done_until is final. Written
-- in the same transaction as the rows, so a restart continues where the last step committed.
create table rollup_progress (
    broker_id  integer not null,
    resolution text    not null, -- '1m' | '1h'
    done_until integer not null,
    primary key (broker_id, resolution)
) without rowid;

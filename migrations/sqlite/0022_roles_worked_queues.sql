-- Queues warren has seen with consumers while they were not dead-letter queues (issue 31,
-- must-have 4): a work queue whose consumers died, or have not connected yet after a restart,
-- keeps its work role, and its wait queue stays a wait queue, instead of the two reading as a
-- dead-letter queue and its feeder for as long as nobody consumes.
create table roles_worked_queues (
    broker_id integer not null references brokers (id),
    vhost     text    not null,
    queue     text    not null,
    seen_at   integer not null, -- unix seconds warren last saw it with consumers (kept to 10 minutes)
    primary key (broker_id, vhost, queue)
) without rowid;

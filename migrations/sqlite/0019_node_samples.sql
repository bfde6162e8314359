-- One row per node of a broker per successful read of /api/nodes (every poll): what the nodes
-- page charts and what `disk_free_predicted_secs` fits its line to. NULL is a value the broker
-- did not give (4.x without the metrics collector gives none), never 0.
--
-- Retention, kept simple (a cluster has a handful of nodes, 3 rows per 10 s poll): raw rows
-- for the raw window, then thinned to the last row of each minute for the minute window, then
-- to the last row of each hour until the retention (`history::nodes::prune`). The node name
-- is stored as text: a few nodes, not worth an id table.
create table node_samples (
    broker_id       integer not null,
    node            text    not null,
    ts              integer not null, -- unix seconds
    running         integer,
    uptime_secs     integer,
    mem_used        integer,
    mem_limit       integer,
    mem_alarm       integer,
    disk_free       integer,
    disk_free_limit integer,
    disk_free_alarm integer,
    fd_used         integer,
    fd_total        integer,
    sockets_used    integer,
    sockets_total   integer,
    proc_used       integer,
    proc_total      integer,
    run_queue       integer,
    partitions      integer,          -- how many nodes it reports a partition with
    primary key (broker_id, node, ts)
) without rowid;

-- Alert rules created in the UI or the API (rules declared in the config file are not stored),
-- the evaluator's state (pending and firing alerts, so that a restart neither forgets nor
-- re-sends them), every phase change, and silences.
create table alert_rules (
    id          text    primary key,
    definition  text    not null,       -- the rule as JSON
    updated_at  integer not null        -- unix seconds
);

create table alert_states (
    rule_id     text    not null,
    alert_key   text    not null,       -- broker/vhost/queue as AlertKey's JSON
    state       text    not null,       -- AlertState as JSON
    -- When the last firing, reminder or resolved notification went out (unix seconds).
    notified_at integer,
    primary key (rule_id, alert_key)
);

create table alert_history (
    id          integer primary key,
    at          integer not null,
    rule_id     text    not null,
    alert_key   text    not null,
    from_phase  text    not null,
    to_phase    text    not null,
    value       real,
    note        text,
    -- Notifications were held back by a silence.
    silenced    integer not null default 0
);
create index alert_history_at on alert_history (at);

create table silences (
    id          integer primary key,
    rule_id     text,                   -- null: every rule
    alert_key   text,                   -- null: every alert of the rule
    until       integer not null,
    comment     text    not null,
    created_by  text    not null,
    created_at  integer not null
);

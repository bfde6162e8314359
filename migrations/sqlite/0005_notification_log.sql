-- Every attempt to deliver a notification, and every notification that could not even be
-- attempted (a channel's queue was full, warren stopped), for the delivery log page and API.
-- Channel and rule are copied by value: the log outlives edits and removals of both.
create table notification_log (
    id           integer primary key,
    at           integer not null,      -- unix seconds
    channel_id   text    not null,
    channel_name text    not null,
    kind         text    not null,      -- firing, resolved, reminder, test
    rule_id      text,                  -- null for a test notification
    alert_key    text,                  -- AlertKey as JSON; null for a test notification
    attempt      integer not null,      -- 1 for the first try; for 'dropped', the one not made
    outcome      text    not null,      -- sent, failed (will retry), gave_up, dropped
    http_status  integer,               -- the receiver's answer, when it was HTTP
    error        text                   -- never holds a channel's URL or password
);
create index notification_log_at on notification_log (at);

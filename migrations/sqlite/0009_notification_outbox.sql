-- The notification outbox: one row per notification and channel that must still be delivered.
-- Retries used to live only in memory, so a warren killed while a receiver was failing lost the
-- notification for good (issue 16, case 8). The alert evaluator writes these rows in the same
-- transaction as the alert states and history: a crash either loses the whole evaluation (it is
-- redone at the next poll) or keeps both. Each channel's task delivers its rows oldest first,
-- one at a time, and deletes a row once the channel accepted it or warren gave up on it.
create table notification_outbox (
    id              integer primary key,    -- the order of delivery within a channel
    channel_id      text    not null,
    -- Copied, like the delivery log's, so a row can still be logged once its channel is gone.
    channel_name    text    not null,
    -- The next three repeat what the notification says, for queries and the delivery log.
    kind            text    not null,       -- firing, resolved, reminder
    rule_id         text    not null,
    alert_key       text    not null,       -- AlertKey as JSON
    notification    text    not null,       -- the Notification as JSON; it round-trips exactly
    -- Attempts made and logged so far: a restart goes on counting, so a dead receiver is still
    -- given up on after the policy's number of attempts.
    attempts        integer not null default 0,
    -- Unix milliseconds: backoffs start below a second. Wall-clock time, so it means the same
    -- after a restart.
    next_attempt_at integer not null,
    created_at      integer not null        -- unix seconds
);
create index notification_outbox_channel on notification_outbox (channel_id, id);

-- alert_states.notified_at was written when a notification was planned, before any channel had
-- it, yet pages and the API showed it as "notified". It keeps its meaning under a truthful name
-- (the planner needs it so that a firing is queued once, not after every poll), and delivered_at
-- says when a channel last accepted a firing or reminder notification of the alert. Rows written
-- by an older warren start with no delivered_at: it did not record whether a channel accepted.
alter table alert_states rename column notified_at to queued_at;
alter table alert_states add column delivered_at integer;

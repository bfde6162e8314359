-- Custody switched on or off per queue by an admin (issue 18, must-haves 1 and 7), over what the
-- `[[custody]]` rules say: 'on' takes a queue no rule names into custody, 'released' hands a
-- queue back (its records replayed into it) and keeps intake off until it is switched on again.
create table custody_queues (
    broker     text    not null,
    vhost      text    not null,
    queue      text    not null,
    state      text    not null check (state in ('on', 'released')),
    changed_at integer not null,
    changed_by text    not null,
    primary key (broker, vhost, queue)
);

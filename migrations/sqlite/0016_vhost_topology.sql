-- The last topology read of each watched vhost (its named exchanges' bindings and its exchanges),
-- so that a warren restarted while the broker does not answer can still tell which stored queues
-- are dead-letter queues: roles come from bindings, which no other table keeps (issue 19, item 5).
-- Replaced whenever a read differs from the stored one.
create table vhost_topology (
    broker_id integer not null references brokers (id),
    vhost     text    not null,
    bindings  text    not null, -- JSON array of {source, destination, destination_type, routing_key}
    exchanges text    not null, -- JSON array of {name, type}
    read_at   integer not null, -- unix seconds of the read
    primary key (broker_id, vhost)
) without rowid;

-- The last client, exchange and node listing of each broker; see migrations/sqlite/0033.
create table broker_listings (
    broker_id bigint not null references brokers (id),
    kind      text   not null, -- clients, exchanges, nodes (live::listings)
    read_at   bigint not null, -- unix milliseconds of the read
    body      text   not null, -- the listing as JSON
    primary key (broker_id, kind)
);

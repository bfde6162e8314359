-- The last client, exchange and node listing of each broker, as its poller made them (issue 33:
-- live pages on every replica). The replica that holds a broker's lease writes them, fenced; the
-- others show them. One row per broker and kind, replaced at each new listing.
create table broker_listings (
    broker_id integer not null references brokers (id),
    kind      text    not null, -- clients, exchanges, nodes (live::listings)
    read_at   integer not null, -- unix milliseconds of the read
    body      text    not null, -- the listing as JSON
    primary key (broker_id, kind)
) without rowid;

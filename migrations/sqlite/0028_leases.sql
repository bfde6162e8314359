-- Leases that divide work between replicas (issue 33, must-have 3; storage::Leases). A row is
-- never deleted: its epoch only grows, so a fencing token is never handed out twice. Expiry is
-- in unix milliseconds by the database's clock, never a replica's.
create table leases (
    name       text    primary key,
    holder     text    not null,
    epoch      integer not null,
    expires_at integer not null
) without rowid;

-- Leases that divide work between replicas (issue 33, must-have 3; storage::Leases); see
-- migrations/sqlite/0028. Expiry is computed from PostgreSQL's clock (clock_timestamp()), so
-- replicas whose clocks disagree still agree on who holds what.
create table leases (
    name       text   primary key,
    holder     text   not null,
    epoch      bigint not null,
    expires_at bigint not null -- unix milliseconds
);

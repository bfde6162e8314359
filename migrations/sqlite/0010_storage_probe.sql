-- One row that `/readyz` and the actions rewrite to prove the database can still be written: a
-- full disk, a read-only file system or a lock held elsewhere fails this write as it would fail
-- the audit log's (issue 16, case 7: a requeue ran on a full disk with no audit row).
create table storage_probe (
    id  integer primary key check (id = 1),
    at  integer not null            -- unix milliseconds of the last successful check
);

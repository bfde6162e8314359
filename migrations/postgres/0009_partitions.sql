-- The tables that grow with the history (issue 33, must-have 5: 30 days of 50,000 queues on one
-- node) become partitioned by day, so that retention drops a day whole instead of deleting its
-- rows one by one (a delete writes every row it removes to the WAL and leaves the table to
-- vacuum; dropping a partition is one catalog change). PostgreSQL only: SQLite has no
-- partitions, and tests/schema.rs compares the public schema, where these tables keep their
-- columns and keys.
--
-- Partitioned: queue_samples (a row per changed queue per poll, the largest by far) and the queue
-- roll-ups (a row per changed queue per minute, kept 7 days; per hour, kept 30). The broker-wide
-- tables hold a row per poll or bucket of a whole broker, a few thousand a day: deleting those
-- rows costs nothing worth a partition. node_samples is thinned, not cut at a day's edge.
--
-- One partition per UTC day of the time column (unix seconds), in the schema `partitions`,
-- named `<table>_YYYYMMDD`, and a default partition, `<table>_default`, which takes a row whose
-- day has no partition (a write before the day's partition was made, a copied database's older
-- days, the rows retention keeps of a dropped day as the values still in force), so no write
-- fails for want of a partition. `storage/postgres/partitions.rs` makes the coming days'
-- partitions and drops the old ones. The primary keys, (queue_id, ts) and (queue_id, bucket),
-- already hold the partition key, so the `on conflict` upserts keep working.
--
-- Existing rows are moved: each table is rebuilt as partitioned, with a partition for every day
-- that holds rows and for today and the next three days, and its rows copied over.
create schema partitions;

do $$
declare
    t     text;
    col   text;
    today bigint := floor(extract(epoch from now()) / 86400)::bigint;
    day   bigint;
begin
    foreach t in array array['queue_samples', 'queue_rollups_1m', 'queue_rollups_1h'] loop
        col := case t when 'queue_samples' then 'ts' else 'bucket' end;
        execute format('alter table %I rename to %I', t, t || '_unpartitioned');
        execute format('alter table %I rename constraint %I to %I',
                       t || '_unpartitioned', t || '_pkey', t || '_unpartitioned_pkey');
        execute format('create table %I (like %I including all) partition by range (%I)',
                       t, t || '_unpartitioned', col);
        execute format('create table partitions.%I partition of %I default', t || '_default', t);
        for day in execute format(
            'select distinct floor(%I / 86400.0)::bigint from %I union select generate_series($1, $1 + 3) order by 1',
            col, t || '_unpartitioned') using today
        loop
            execute format('create table partitions.%I partition of %I for values from (%s) to (%s)',
                           t || '_' || to_char(to_timestamp(day * 86400) at time zone 'UTC', 'YYYYMMDD'),
                           t, day * 86400, (day + 1) * 86400);
        end loop;
        execute format('insert into %I select * from %I', t, t || '_unpartitioned');
        execute format('drop table %I', t || '_unpartitioned');
    end loop;
end
$$;

-- Which message a custody record is (`dlq::message::fingerprint`, the identity snapshots and
-- moves select by), kept so that intake can tell a second copy from a first read. RabbitMQ 4.3
-- marks a dead letter `redelivered` on its first delivery from a quorum DLQ (DOMAIN.md §10), so
-- the flag alone would call every record a possible duplicate there: a record is flagged only
-- when the broker says it delivered the message before AND custody already holds one alike in
-- all (the crash between commit and ack that leaves a message in both places). Rows taken in
-- before this migration have no fingerprint and are never matched.
alter table custody_messages add column fingerprint text;
create index custody_by_fingerprint on custody_messages (broker, vhost, queue, fingerprint);

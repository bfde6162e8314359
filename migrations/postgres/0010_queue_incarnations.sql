-- When the queue a row describes began, as warren saw it; see migrations/sqlite/0031.
alter table queues add column incarnation_since bigint;

-- The group of a record's error (`dlq::framework::error_group` of `error`: its type and its
-- message with numbers, ids, UUIDs, hex and quoted values replaced), so that a filter by group
-- runs in SQL (issue 31, must-have 6: an order number in every message made one group per
-- message). Rows taken in before this migration are filled at start (`custody::fill_error_groups`).
alter table custody_messages add column error_group text;
-- Which rows still need it: the query at start finds them here, not by reading every row past
-- its body (once they are filled, the index is empty).
create index custody_error_group_missing on custody_messages (id) where error_group is null and error is not null;

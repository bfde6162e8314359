-- First and last seen per triage group (issue 18, must-have 3), read from the covering index
-- like the counts: received_at joins it.
drop index custody_triage;
create index custody_triage on custody_messages (broker, vhost, queue, state, reason, original_queue, error, size, received_at);

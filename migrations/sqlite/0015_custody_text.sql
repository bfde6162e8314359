-- Text search over custody reads every body once with LIKE (2.5x faster than lower() and
-- instr(), which copy each body), but LIKE stops at a NUL byte: a body that holds one is also
-- searched the slow way. 1: it holds a NUL; 0: it does not; null (rows from before): not known.
alter table custody_messages add column body_nul integer;

-- Secrets of this installation, made once at its first start and never shown. `identity` keys
-- the tokens the dead-letter browser shows for its messages (dlq::message::IdentityKey): a bare
-- digest of a message's content would let a reader below the payload role test a guessed
-- payload against it (issue 29). Kept here so that tokens survive a restart.
create table instance_keys (
    name text primary key,
    key  blob not null
) without rowid;

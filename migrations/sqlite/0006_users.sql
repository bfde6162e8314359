-- Local accounts, their browser sessions, and API tokens for scripts. Secrets are stored only as
-- hashes, so a copy of this file gives no way in: passwords as argon2id PHC strings, session ids
-- and tokens as SHA-256 hex (they are 32 random bytes; a slow hash would add nothing).
-- Login throttling is kept in memory, not here (see src/auth/throttle.rs).
create table users (
    name          text    primary key,
    role          text    not null check (role in ('viewer', 'operator', 'admin')),
    password_hash text    not null,
    created_at    integer not null,       -- unix seconds
    disabled      integer not null default 0
);

-- The role is read from users on every request, so a role change or a disabled account takes
-- effect at once. A session ends at expires_at (absolute) or after an idle time measured from
-- last_seen_at, which is refreshed at most once a minute to keep reads from writing.
create table sessions (
    id_hash      text    primary key,     -- SHA-256 of the cookie value
    user_name    text    not null references users (name) on delete cascade,
    csrf_token   text    not null,
    created_at   integer not null,
    expires_at   integer not null,
    last_seen_at integer not null
) without rowid;

create index sessions_by_user on sessions (user_name);

-- A token acts with its own role, whoever created it; revoked tokens stay for the record.
create table api_tokens (
    id           integer primary key,
    name         text    not null,
    role         text    not null check (role in ('viewer', 'operator', 'admin')),
    token_hash   text    not null unique, -- SHA-256 of the token
    created_by   text    not null,
    created_at   integer not null,
    last_used_at integer,
    revoked      integer not null default 0
);

create unique index api_tokens_live_name on api_tokens (name) where revoked = 0;

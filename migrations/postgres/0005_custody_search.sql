-- Custody's search means on PostgreSQL what it means on SQLite (`storage/postgres/custody.rs`).
-- No tables change: these functions read the columns `0001_schema.sql` made.

-- A body as text for `like`, one character per byte (LATIN1 maps bytes 0-255 to U+0000-U+00FF),
-- so that text is found in it byte for byte as SQLite's `like` finds it in `cast(body as text)`,
-- whatever bytes the body holds, UTF-8 or not. PostgreSQL's text cannot hold a NUL: each one
-- becomes U+0100, which no searched text (bytes mapped the same way) can hold. To split at NULs
-- only, the escape encoding's doubled backslashes are set aside first: then every `\000` left
-- is a NUL.
create function custody_text(body bytea) returns text
language sql immutable strict parallel safe as $$
    select case when position('\x00'::bytea in body) = 0 then convert_from(body, 'LATIN1') else (
        select string_agg(convert_from(decode(replace(piece, chr(57344), '\\'), 'escape'), 'LATIN1'), chr(256)
                          order by n)
        from unnest(string_to_array(replace(encode(body, 'escape'), '\\', chr(57344)), '\000'))
             with ordinality as pieces (piece, n))
    end
$$;

-- A body as JSON, or null when it is not JSON (not UTF-8, not valid, or holding a \u0000,
-- which jsonb refuses): SQLite's `json_valid` guard, since a failed cast would fail the whole
-- search. The exception block makes it parallel unsafe (the default).
create function custody_json(body bytea) returns jsonb
language plpgsql immutable strict as $$
begin
    return convert_from(body, 'UTF8')::jsonb;
exception when others then
    return null;
end
$$;

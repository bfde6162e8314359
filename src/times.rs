//! Times in the JSON API are RFC 3339 strings in UTC (`2026-12-07T05:40:40Z`). Fields that were
//! unix seconds keep them for one release (deprecated, docs/api.md "Times") and get a twin
//! beside them, named `<field>_rfc3339`.
//!
//! A field marked `#[serde(flatten, serialize_with = "crate::times::<field>")]` writes both:
//! its old key with the number as before and the twin with the same instant as RFC 3339 (`null`
//! where the number is `null`, or is no time). One serializer per key, so the structs, their
//! constructors and the code that reads the numbers stay as they are.

use chrono::DateTime;
use serde::ser::{SerializeMap, Serializer};

/// Unix seconds, present or not.
pub trait UnixSecs {
    fn secs(&self) -> Option<i64>;
}

impl UnixSecs for i64 {
    fn secs(&self) -> Option<i64> {
        Some(*self)
    }
}

impl UnixSecs for Option<i64> {
    fn secs(&self) -> Option<i64> {
        *self
    }
}

/// Writes `key` as the number and `<key>_rfc3339` as the time.
fn both<S: Serializer>(key: &'static str, twin: &'static str, value: &impl UnixSecs, s: S) -> Result<S::Ok, S::Error> {
    let mut map = s.serialize_map(Some(2))?;
    map.serialize_entry(key, &value.secs())?;
    map.serialize_entry(twin, &value.secs().and_then(|secs| DateTime::from_timestamp(secs, 0)))?;
    map.end()
}

/// The two keys `both` writes, as the description of the answer says them (for
/// `#[schema(schema_with = …)]` beside the `serialize_with` of the same name).
fn both_schema(key: &str, twin: &str) -> utoipa::openapi::Schema {
    use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, SchemaType, Type};
    ObjectBuilder::new()
        .property(
            key,
            ObjectBuilder::new()
                .schema_type(SchemaType::Array(vec![Type::Integer, Type::Null]))
                .description(Some(format!("Deprecated: unix seconds; `{twin}` instead")))
                .deprecated(Some(utoipa::openapi::Deprecated::True)),
        )
        .property(
            twin,
            ObjectBuilder::new()
                .schema_type(SchemaType::Array(vec![Type::String, Type::Null]))
                .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime)))
                .description(Some("RFC 3339, UTC")),
        )
        .into()
}

macro_rules! unix_and_rfc3339 {
    ($($key:ident),* $(,)?) => {
        $(
            #[doc = concat!("`", stringify!($key), "` (unix seconds) and `", stringify!($key), "_rfc3339`.")]
            pub fn $key<S: Serializer>(value: &impl UnixSecs, s: S) -> Result<S::Ok, S::Error> {
                both(stringify!($key), concat!(stringify!($key), "_rfc3339"), value, s)
            }
        )*
        /// The schemas of the pairs, by the same names (`schema::created_at()`, ...).
        pub mod schema {
            $(
                pub fn $key() -> utoipa::openapi::Schema {
                    super::both_schema(stringify!($key), concat!(stringify!($key), "_rfc3339"))
                }
            )*
        }
        /// Every deprecated unix-seconds key of the API (docs/api.md lists the same).
        pub const DEPRECATED_UNIX_KEYS: &[&str] = &[$(stringify!($key)),*];
    };
}

unix_and_rfc3339!(
    ts,
    from,
    to,
    at,
    last_at,
    created_at,
    last_used_at,
    connected_at,
    received_at,
    first_seen,
    last_seen,
    oldest_taken_at,
    retry_at,
    first_death_at,
    time,
    observed_head_died_at,
    as_of,
    topology_as_of,
);

#[cfg(test)]
mod tests {
    #[derive(serde::Serialize)]
    struct Sample {
        name: &'static str,
        #[serde(flatten, serialize_with = "super::created_at")]
        created_at: i64,
        #[serde(flatten, serialize_with = "super::last_used_at")]
        last_used_at: Option<i64>,
    }

    #[test]
    fn a_unix_field_is_written_with_its_rfc3339_twin() {
        let sample = Sample { name: "ci", created_at: 1_700_000_000, last_used_at: None };
        assert_eq!(
            serde_json::to_value(&sample).unwrap(),
            serde_json::json!({
                "name": "ci",
                "created_at": 1_700_000_000,
                "created_at_rfc3339": "2023-11-14T22:13:20Z",
                "last_used_at": null,
                "last_used_at_rfc3339": null,
            })
        );
    }
}

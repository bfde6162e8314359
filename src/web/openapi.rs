//! The OpenAPI 3.1 description of the JSON API, served at `/api/v1/openapi.json` without login
//! (tools read it before they have a token; it says nothing a client could not learn by asking).
//!
//! Every route of `/api/v1` is in `OPERATIONS`; `tests/openapi.rs` reads the routers in
//! `src/web/` and fails when a route is missing here or listed here without a router serving
//! it. The error body is described from the type that writes it (`ErrorBody`).

use axum::routing::get;
use axum::{Json, Router};
use utoipa::openapi::path::{HttpMethod, OperationBuilder, ParameterBuilder, ParameterIn};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, OneOfBuilder, SchemaType, Type};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, Http, HttpAuthScheme, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{
    ComponentsBuilder, ContentBuilder, InfoBuilder, OpenApi, OpenApiBuilder, Paths, Ref, RefOr, Required,
    ResponseBuilder, Schema, Tag,
};
use utoipa::{PartialSchema, ToSchema};

use crate::state::AppState;
use crate::web::error::{ErrorBody, ErrorDetail, FieldError};
use crate::web::{access, alerts, brokers, dlq, firing, query};

pub fn router() -> Router<AppState> {
    Router::new().route("/api/v1/openapi.json", get(|| async { Json(document()) }))
}

/// One operation of the API: method, path as the router has it, what it does.
struct Operation {
    method: HttpMethod,
    path: &'static str,
    tag: &'static str,
    summary: &'static str,
}

const fn get_op(path: &'static str, tag: &'static str, summary: &'static str) -> Operation {
    Operation { method: HttpMethod::Get, path, tag, summary }
}

const fn post_op(path: &'static str, tag: &'static str, summary: &'static str) -> Operation {
    Operation { method: HttpMethod::Post, path, tag, summary }
}

const QUEUE: &str = "/api/v1/queues/{broker}/{vhost}/{queue}";

/// Every route of `/api/v1` (the routers in `src/web/`; `tests/openapi.rs` compares the two).
const OPERATIONS: &[Operation] = &[
    get_op("/api/v1/openapi.json", "meta", "This description (no login needed)"),
    get_op("/api/v1/me", "access", "Who is asking: user, role, CSRF token"),
    get_op("/api/v1/users", "access", "Users (admin)"),
    post_op("/api/v1/users", "access", "Add a user (admin)"),
    post_op("/api/v1/users/{name}/delete", "access", "Delete a user (admin)"),
    post_op("/api/v1/users/{name}/password", "access", "Set a user's password"),
    post_op("/api/v1/users/{name}/role", "access", "Change a user's role (admin; the last enabled admin keeps it)"),
    get_op("/api/v1/tokens", "access", "API tokens"),
    post_op("/api/v1/tokens", "access", "Create an API token (its secret is shown once)"),
    post_op("/api/v1/tokens/{id}/revoke", "access", "Revoke an API token"),
    get_op("/api/v1/brokers", "brokers", "Every broker: status, rates, totals"),
    get_op("/api/v1/brokers/{broker}", "brokers", "One broker: where each number comes from, cadences, calls"),
    get_op("/api/v1/brokers/{broker}/history", "brokers", "A broker's history over a time range"),
    get_op("/api/v1/brokers/{broker}/nodes", "brokers", "A broker's nodes against their limits"),
    get_op("/api/v1/brokers/{broker}/advice", "brokers", "The advisor's findings on a broker"),
    get_op("/api/v1/brokers/{broker}/nodes/{node}/history", "brokers", "A node's history"),
    get_op("/api/v1/brokers/{broker}/connections", "clients", "Connections"),
    get_op("/api/v1/brokers/{broker}/channels", "clients", "Channels"),
    get_op("/api/v1/brokers/{broker}/exchanges", "topology", "Exchanges, rates, unroutable publishes"),
    get_op("/api/v1/queues", "queues", "Queues, filtered and paged"),
    get_op(QUEUE, "queues", "One queue"),
    get_op("/api/v1/queues/{broker}/{vhost}/{queue}/history", "queues", "A queue's history"),
    get_op("/api/v1/queues/{broker}/{vhost}/{queue}/consumers", "clients", "A queue's consumers"),
    get_op("/api/v1/queues/{broker}/{vhost}/{queue}/routing", "topology", "What routes into a queue"),
    post_op("/api/v1/queues/{broker}/{vhost}/{queue}/requeue", "actions", "Move dead letters back (a job)"),
    post_op("/api/v1/queues/{broker}/{vhost}/{queue}/delete", "actions", "Delete messages (a job)"),
    post_op("/api/v1/queues/{broker}/{vhost}/{queue}/purge", "actions", "Purge a queue"),
    get_op("/api/v1/queues/{broker}/{vhost}/{queue}/snapshot", "dead letters", "A DLQ's latest snapshot"),
    post_op("/api/v1/queues/{broker}/{vhost}/{queue}/snapshot", "dead letters", "Take a DLQ snapshot"),
    get_op("/api/v1/queues/{broker}/{vhost}/{queue}/custody", "custody", "Messages held in custody"),
    post_op("/api/v1/queues/{broker}/{vhost}/{queue}/custody/start", "custody", "Take messages into custody"),
    post_op("/api/v1/queues/{broker}/{vhost}/{queue}/custody/release", "custody", "Release held messages"),
    post_op("/api/v1/queues/{broker}/{vhost}/{queue}/custody/replay", "custody", "Publish held messages again"),
    get_op("/api/v1/queues/{broker}/{vhost}/{queue}/custody/export", "custody", "Export held messages"),
    post_op("/api/v1/queues/{broker}/{vhost}/{queue}/custody/import", "custody", "Import messages into custody"),
    get_op("/api/v1/queues/{broker}/{vhost}/{queue}/custody/{id}", "custody", "One held message"),
    post_op("/api/v1/queues/{broker}/{vhost}/{queue}/custody/{id}/edit", "custody", "Edit a held message"),
    post_op("/api/v1/queues/{broker}/{vhost}/{queue}/custody/{id}/delete", "custody", "Delete a held message"),
    get_op("/api/v1/jobs/{id}", "actions", "A job's progress and report"),
    post_op("/api/v1/jobs/{id}/cancel", "actions", "Cancel a job"),
    get_op("/api/v1/audit", "audit", "The audit log, newest first"),
    get_op("/api/v1/audit/{id}/messages", "audit", "The messages an audited action moved"),
    get_op("/api/v1/alerts", "alerts", "Firing alerts"),
    get_op("/api/v1/alerts/history", "alerts", "Alert history"),
    get_op("/api/v1/alerts/rules", "alerts", "Alert rules"),
    post_op("/api/v1/alerts/rules", "alerts", "Create an alert rule"),
    get_op("/api/v1/alerts/rules/export", "alerts", "Export the rules"),
    post_op("/api/v1/alerts/rules/preview", "alerts", "Preview a rule against history"),
    get_op("/api/v1/alerts/rules/{id}", "alerts", "One rule"),
    post_op("/api/v1/alerts/rules/{id}", "alerts", "Change a rule"),
    post_op("/api/v1/alerts/rules/{id}/delete", "alerts", "Delete a rule"),
    get_op("/api/v1/silences", "alerts", "Silences"),
    post_op("/api/v1/silences", "alerts", "Create a silence"),
    post_op("/api/v1/silences/{id}/expire", "alerts", "Expire a silence"),
    get_op("/api/v1/notifications/channels", "alerts", "Notification channels"),
    post_op("/api/v1/notifications/channels/{id}/test", "alerts", "Send a test notification"),
    get_op("/api/v1/notifications/deliveries", "alerts", "Notification deliveries"),
];

/// The statuses any operation may answer with the error body: a path or query that does not
/// parse (400), no or a wrong credential (401), a role too low or a missing CSRF token (403),
/// nothing by that name (404), a body too large (413), the broker failed (502), busy or storage
/// full (503), a bug (500).
const ERRORS_OF_EVERY_OPERATION: &[(&str, &str)] = &[
    ("400", "The request does not parse"),
    ("401", "No credential, or a wrong one"),
    ("403", "The role may not do this, or the CSRF token is missing"),
    ("404", "Nothing by that name"),
    ("405", "The path does not take this method"),
    ("413", "The body is too large"),
    ("500", "An internal error (details are logged, not shown)"),
    ("502", "The broker refused or did not answer"),
    ("503", "warren is busy or its database cannot be written"),
];

/// What a POST may answer besides: the body is not JSON of the right type (415), it is in use
/// (409), it parsed but is not valid (422), a password check throttled (429).
const ERRORS_OF_POSTS: &[(&str, &str)] = &[
    ("409", "It conflicts with the current state"),
    ("415", "The body is not JSON"),
    ("422", "The input parsed but is not valid (one message per field)"),
    ("429", "Too many attempts"),
];

/// The description, built anew per request (it is small; nothing is cached to go stale).
pub fn document() -> OpenApi {
    let mut paths = Paths::new();
    let mut schemas = Vec::new();
    for op in OPERATIONS {
        paths.add_path_operation(op.path, vec![op.method.clone()], operation(op, &mut schemas));
    }
    let components = ComponentsBuilder::new()
        .schemas_from_iter(schemas)
        .schema("Error", ErrorBody::schema())
        .schema("ErrorDetail", ErrorDetail::schema())
        .schema("FieldError", FieldError::schema())
        .security_scheme(
            "token",
            SecurityScheme::Http(
                Http::builder()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("An API token (`/access` or `POST /api/v1/tokens`); POSTs need no CSRF token"))
                    .build(),
            ),
        )
        .security_scheme(
            "session",
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
                crate::auth::SESSION_COOKIE,
                "The login session of the pages; a POST also needs the session's CSRF token in the \
             `x-csrf-token` header (from `GET /api/v1/me`)",
            ))),
        )
        .build();
    let mut doc = OpenApiBuilder::new()
        .info(
            InfoBuilder::new()
                .title("warren")
                .version(env!("CARGO_PKG_VERSION"))
                .description(Some(
                    "The JSON API of warren, a dashboard for RabbitMQ. Errors are always \
                     `{\"error\": {\"code\", \"message\"}}`. See docs/api.md.",
                ))
                .build(),
        )
        .paths(paths)
        .components(Some(components))
        .security(Some([
            SecurityRequirement::new("token", Vec::<String>::new()),
            SecurityRequirement::new("session", Vec::<String>::new()),
        ]))
        .build();
    doc.tags = Some(
        [
            "meta",
            "access",
            "brokers",
            "clients",
            "topology",
            "queues",
            "actions",
            "dead letters",
            "custody",
            "audit",
            "alerts",
        ]
        .into_iter()
        .map(Tag::new)
        .collect(),
    );
    doc
}

/// A reference to `T`'s schema, which goes into the components with the schemas it refers to.
fn named<T: ToSchema>(schemas: &mut Vec<(String, RefOr<Schema>)>) -> RefOr<Schema> {
    T::schemas(schemas);
    schemas.push((T::name().into_owned(), T::schema()));
    Ref::from_schema_name(T::name()).into()
}

/// `{"<key>": [T]}`.
fn object_of_array(key: &str, item: RefOr<Schema>) -> RefOr<Schema> {
    ObjectBuilder::new().property(key, ArrayBuilder::new().items(item)).required(key).into()
}

/// One page of a list (`query::Paged`): `{"items": [T], "next_cursor", "limit"}`.
fn paged(item: RefOr<Schema>) -> ObjectBuilder {
    ObjectBuilder::new()
        .property("items", ArrayBuilder::new().items(item))
        .required("items")
        .property(
            "next_cursor",
            ObjectBuilder::new()
                .schema_type(SchemaType::Array(vec![Type::String, Type::Null]))
                .description(Some("The `cursor` of the next page; `null` on the last one")),
        )
        .required("next_cursor")
        .property("limit", ObjectBuilder::new().schema_type(Type::Integer).minimum(Some(1)).maximum(Some(500)))
        .required("limit")
}

/// A list that answers the page with `cursor` and, for one release more, a bare array without.
fn paged_or_array(item: RefOr<Schema>) -> RefOr<Schema> {
    OneOfBuilder::new().item(paged(item.clone())).item(ArrayBuilder::new().items(item)).into()
}

/// The schema of a successful answer, from the type the handler answers (`ToSchema`), where
/// that type describes itself; `None`: still any JSON value.
fn answer_schema(op: &Operation, schemas: &mut Vec<(String, RefOr<Schema>)>) -> Option<RefOr<Schema>> {
    use crate::alerts::{notify::DeliveryRecord, store};
    if op.method != HttpMethod::Get {
        return None;
    }
    Some(match op.path {
        "/api/v1/users" => object_of_array("users", named::<crate::auth::User>(schemas)),
        "/api/v1/tokens" => object_of_array("tokens", named::<crate::auth::TokenInfo>(schemas)),
        "/api/v1/brokers/{broker}/history" => named::<brokers::history::BrokerHistory>(schemas),
        "/api/v1/brokers/{broker}/advice" => named::<crate::advisor::Advice>(schemas),
        "/api/v1/queues/{broker}/{vhost}/{queue}/history" => named::<brokers::history::QueueHistory>(schemas),
        "/api/v1/brokers/{broker}/nodes/{node}/history" => named::<brokers::nodes::NodeHistoryJson>(schemas),
        "/api/v1/me" => named::<access::accounts::MeJson>(schemas),
        "/api/v1/audit/{id}/messages" => {
            ArrayBuilder::new().items(named::<crate::dlq::fates::MessageRecord>(schemas)).into()
        }
        "/api/v1/alerts" => ArrayBuilder::new().items(named::<firing::AlertView>(schemas)).into(),
        "/api/v1/notifications/channels" => {
            ArrayBuilder::new().items(named::<crate::alerts::notify::ChannelView>(schemas)).into()
        }
        "/api/v1/silences" => ArrayBuilder::new().items(named::<store::Silence>(schemas)).into(),
        "/api/v1/alerts/history" => paged_or_array(named::<store::HistoryEntry>(schemas)),
        "/api/v1/notifications/deliveries" => paged_or_array(named::<DeliveryRecord>(schemas)),
        "/api/v1/audit" => paged_or_array(named::<crate::audit::Record>(schemas)),
        _ => return None,
    })
}

fn operation(op: &Operation, schemas: &mut Vec<(String, RefOr<Schema>)>) -> utoipa::openapi::path::Operation {
    let id = format!(
        "{}{}",
        method_name(&op.method),
        op.path.trim_start_matches("/api/v1").replace(['/', '{', '}', '.'], "_")
    );
    let mut builder = OperationBuilder::new().operation_id(Some(id)).summary(Some(op.summary)).tag(op.tag);
    for parameter in query_parameters(op) {
        builder = builder.parameter(parameter);
    }
    for name in path_parameters(op.path) {
        builder = builder.parameter(
            ParameterBuilder::new()
                .name(name)
                .parameter_in(ParameterIn::Path)
                .required(Required::True)
                .schema(Some(if integer_id(op.path, name) { i64::schema() } else { String::schema() })),
        );
    }
    // Typed schemas of the answers are still to come (each handler's type deriving ToSchema);
    // until then a success is any JSON value, which the checks accept and nothing promises more.
    let any_json = || ContentBuilder::new().schema(Some(any_value())).build();
    let success = match op.path {
        "/api/v1/alerts/rules/export" => ResponseBuilder::new()
            .description("The rules as TOML, as `[[alerts]]` tables of the configuration file")
            .content("application/toml", ContentBuilder::new().schema(Some(String::schema())).build()),
        "/api/v1/queues/{broker}/{vhost}/{queue}/custody/export" => ResponseBuilder::new()
            .description("The held messages, one JSON object a line")
            .content("application/x-ndjson", ContentBuilder::new().schema(Some(String::schema())).build()),
        _ => {
            let schema = answer_schema(op, schemas).unwrap_or_else(|| any_value().into());
            ResponseBuilder::new()
                .description("OK")
                .content("application/json", ContentBuilder::new().schema(Some(schema)).build())
        }
    }
    .build();
    builder = builder.response("200", success);
    let error = |what: &str| {
        ResponseBuilder::new()
            .description(what)
            .content("application/json", ContentBuilder::new().schema(Some(Ref::from_schema_name("Error"))).build())
            .build()
    };
    for (status, what) in ERRORS_OF_EVERY_OPERATION {
        builder = builder.response(*status, error(what));
    }
    if op.method == HttpMethod::Post {
        builder = builder.request_body(Some(
            RequestBodyBuilder::new()
                .description(Some("A JSON object; the pages send the same fields as a form"))
                .content("application/json", any_json())
                .build(),
        ));
        for (status, what) in ERRORS_OF_POSTS {
            builder = builder.response(*status, error(what));
        }
    }
    if op.path == "/api/v1/openapi.json" {
        builder = builder.securities(Some(Vec::<SecurityRequirement>::new()));
    }
    builder.build()
}

fn any_value() -> Schema {
    Schema::Object(ObjectBuilder::new().schema_type(SchemaType::AnyValue).build())
}

fn method_name(method: &HttpMethod) -> &'static str {
    match method {
        HttpMethod::Post => "post",
        _ => "get",
    }
}

/// The query parameters of the lists and histories, from the types their handlers parse.
fn query_parameters(op: &Operation) -> Vec<utoipa::openapi::path::Parameter> {
    use utoipa::IntoParams;
    let query = || Some(ParameterIn::Query);
    if op.method != HttpMethod::Get {
        return Vec::new();
    }
    match op.path {
        "/api/v1/queues" => query::QueueQuery::into_params(query),
        "/api/v1/brokers/{broker}/history"
        | "/api/v1/brokers/{broker}/nodes/{node}/history"
        | "/api/v1/queues/{broker}/{vhost}/{queue}/history" => query::RangeQuery::into_params(query),
        "/api/v1/audit" => access::audit::AuditQuery::into_params(query),
        "/api/v1/brokers/{broker}/advice" => brokers::advisor::AdviceFilter::into_params(query),
        "/api/v1/alerts/history" | "/api/v1/notifications/deliveries" => alerts::api::Limit::into_params(query),
        "/api/v1/queues/{broker}/{vhost}/{queue}/custody" => dlq::custody_api::ListQuery::into_params(query),
        _ => Vec::new(),
    }
}

/// Jobs, audit entries, custody records, silences and tokens are numbered; rules and
/// notification channels are named in the configuration.
fn integer_id(path: &str, name: &str) -> bool {
    name == "id" && !path.starts_with("/api/v1/alerts/rules/") && !path.starts_with("/api/v1/notifications/channels/")
}

/// The `{name}` segments of a route.
fn path_parameters(path: &str) -> impl Iterator<Item = &str> {
    path.split('/').filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'))
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_path_parameter_is_declared_once() {
        let doc = serde_json::to_value(super::document()).unwrap();
        assert_eq!(doc["openapi"], "3.1.0");
        let item = &doc["paths"]["/api/v1/queues/{broker}/{vhost}/{queue}/custody/{id}"]["get"];
        let names: Vec<&str> =
            item["parameters"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["broker", "vhost", "queue", "id"]);
    }
}

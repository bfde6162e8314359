//! The OpenAPI 3.1 description of the JSON API, served at `/api/v1/openapi.json` without login
//! (tools read it before they have a token; it says nothing a client could not learn by asking).
//!
//! Every route of `/api/v1` is in `OPERATIONS`; `tests/openapi.rs` reads the routers in
//! `src/web/` and fails when a route is missing here or listed here without a router serving
//! it. The error body is described from the type that writes it (`ErrorBody`).

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use utoipa::openapi::path::{HttpMethod, OperationBuilder, ParameterBuilder, ParameterIn};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::schema::{AllOfBuilder, ArrayBuilder, ObjectBuilder, OneOfBuilder, SchemaType, Type};
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
    Router::new().route(
        "/api/v1/openapi.json",
        get(|State(state): State<AppState>| async move { Json(document_at(&state.base_path)) }),
    )
}

/// The description as served under `base_path` (the path of `public_url`): its one server is
/// that path, so that a client resolves the operations' paths under it, as a proxy at a base
/// path expects (without a server, a client resolves them at the host's root).
fn document_at(base_path: &str) -> OpenApi {
    let mut doc = document();
    if !base_path.is_empty() {
        doc.servers = Some(vec![utoipa::openapi::Server::new(base_path)]);
    }
    doc
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
const IMPORT: &str = "/api/v1/queues/{broker}/{vhost}/{queue}/custody/import";

/// The POSTs whose handlers read no body: what they act on is in the path.
const WITHOUT_BODY: &[&str] = &[
    "/api/v1/users/{name}/delete",
    "/api/v1/tokens/{id}/revoke",
    "/api/v1/alerts/rules/{id}/delete",
    "/api/v1/silences/{id}/expire",
    "/api/v1/notifications/channels/{id}/test",
    "/api/v1/jobs/{id}/cancel",
    "/api/v1/queues/{broker}/{vhost}/{queue}/purge",
    "/api/v1/queues/{broker}/{vhost}/{queue}/custody/start",
    "/api/v1/queues/{broker}/{vhost}/{queue}/custody/release",
    "/api/v1/queues/{broker}/{vhost}/{queue}/custody/{id}/delete",
];

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
    post_op("/api/v1/brokers/{broker}/advice/acknowledge", "brokers", "Acknowledge a finding with a reason (operator)"),
    post_op("/api/v1/brokers/{broker}/advice/unacknowledge", "brokers", "Take an acknowledgement back (operator)"),
    get_op("/api/v1/brokers/{broker}/advice/apply", "brokers", "What applying a finding's policy would set"),
    post_op("/api/v1/brokers/{broker}/advice/apply", "brokers", "Apply a finding's policy as confirmed (operator)"),
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
    post_op(IMPORT, "custody", "Import messages into custody"),
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

/// The schema of a successful answer, from the type the handler answers (`ToSchema`); the
/// answers a handler writes with `json!` are put together here from the types they hold.
/// `None`: a POST, still any JSON value.
fn answer_schema(op: &Operation, schemas: &mut Vec<(String, RefOr<Schema>)>) -> Option<RefOr<Schema>> {
    use crate::alerts::{notify::DeliveryRecord, store};
    use crate::dlq::custody::{Listing, Record};
    use crate::web::brokers::{api, clients, load, nodes, topology};
    if op.method != HttpMethod::Get {
        return None;
    }
    let array = |item: RefOr<Schema>| -> RefOr<Schema> { ArrayBuilder::new().items(item).into() };
    Some(match op.path {
        "/api/v1/openapi.json" => openapi_document(),
        "/api/v1/users" => object_of_array("users", named::<crate::auth::User>(schemas)),
        "/api/v1/tokens" => object_of_array("tokens", named::<crate::auth::TokenInfo>(schemas)),
        "/api/v1/brokers" => array(named::<api::BrokerJson>(schemas)),
        "/api/v1/brokers/{broker}" => named::<load::BrokerLoadJson>(schemas),
        "/api/v1/brokers/{broker}/history" => named::<brokers::history::BrokerHistory>(schemas),
        "/api/v1/brokers/{broker}/nodes" => named::<nodes::NodesJson>(schemas),
        "/api/v1/brokers/{broker}/nodes/{node}/history" => named::<nodes::NodeHistoryJson>(schemas),
        "/api/v1/brokers/{broker}/connections" => named::<clients::ConnectionsJson>(schemas),
        "/api/v1/brokers/{broker}/channels" => named::<clients::ChannelsJson>(schemas),
        "/api/v1/brokers/{broker}/exchanges" => named::<topology::ExchangesJson>(schemas),
        "/api/v1/queues" => named::<api::QueueList>(schemas),
        QUEUE => named::<api::QueueJson>(schemas),
        "/api/v1/brokers/{broker}/advice" => named::<crate::advisor::Advice>(schemas),
        "/api/v1/brokers/{broker}/advice/apply" => named::<brokers::advisor_actions::ApplyPreview>(schemas),
        "/api/v1/queues/{broker}/{vhost}/{queue}/history" => named::<brokers::history::QueueHistory>(schemas),
        "/api/v1/queues/{broker}/{vhost}/{queue}/consumers" => named::<clients::ConsumersJson>(schemas),
        "/api/v1/queues/{broker}/{vhost}/{queue}/routing" => named::<topology::RoutingJson>(schemas),
        "/api/v1/queues/{broker}/{vhost}/{queue}/snapshot" => named::<dlq::snapshot::SnapshotAnswer>(schemas),
        "/api/v1/queues/{broker}/{vhost}/{queue}/custody" => {
            let record = named::<Record>(schemas);
            paged(record)
                .property("in_custody", bool::schema())
                .required("in_custody")
                .property("in_broker", nullable(u64::schema()))
                .required("in_broker")
                .property("custody", named::<Listing>(schemas))
                .required("custody")
                .into()
        }
        "/api/v1/queues/{broker}/{vhost}/{queue}/custody/{id}" => ObjectBuilder::new()
            .property("record", named::<Record>(schemas))
            .required("record")
            // Left out when `payload_hidden`.
            .property("message", named::<crate::dlq::message::SnapshotMessage>(schemas))
            .property("payload_hidden", bool::schema())
            .required("payload_hidden")
            .into(),
        "/api/v1/jobs/{id}" => named::<crate::dlq::jobs::JobStatus>(schemas),
        "/api/v1/me" => named::<access::accounts::MeJson>(schemas),
        "/api/v1/audit" => paged_or_array(named::<crate::audit::Record>(schemas)),
        "/api/v1/audit/{id}/messages" => array(named::<crate::dlq::fates::MessageRecord>(schemas)),
        "/api/v1/alerts" => array(named::<firing::AlertView>(schemas)),
        "/api/v1/alerts/history" => paged_or_array(named::<store::HistoryEntry>(schemas)),
        "/api/v1/alerts/rules" => array(stored_rule(schemas)),
        "/api/v1/alerts/rules/{id}" => stored_rule(schemas),
        "/api/v1/silences" => array(named::<store::Silence>(schemas)),
        "/api/v1/notifications/channels" => array(named::<crate::alerts::notify::ChannelView>(schemas)),
        "/api/v1/notifications/deliveries" => paged_or_array(named::<DeliveryRecord>(schemas)),
        _ => return None,
    })
}

/// The status of a success: 201 for what a POST creates, 202 for what it starts (a job).
fn success_status(op: &Operation) -> &'static str {
    match (&op.method, op.path) {
        (HttpMethod::Post, "/api/v1/users" | "/api/v1/tokens" | "/api/v1/alerts/rules" | "/api/v1/silences") => "201",
        (
            HttpMethod::Post,
            "/api/v1/jobs/{id}/cancel"
            | "/api/v1/queues/{broker}/{vhost}/{queue}/requeue"
            | "/api/v1/queues/{broker}/{vhost}/{queue}/delete"
            | "/api/v1/queues/{broker}/{vhost}/{queue}/custody/replay"
            | "/api/v1/queues/{broker}/{vhost}/{queue}/custody/release",
        ) => "202",
        _ => "200",
    }
}

/// The answers of the POSTs, from the types they hold (the handlers write them with `json!`).
fn post_answer(op: &Operation, schemas: &mut Vec<(String, RefOr<Schema>)>) -> Option<RefOr<Schema>> {
    use crate::dlq::jobs::JobStatus;
    if op.method != HttpMethod::Post {
        return None;
    }
    let integer = || i64::schema();
    let string = || String::schema();
    let object = |fields: Vec<(&str, RefOr<Schema>)>| -> RefOr<Schema> {
        fields
            .into_iter()
            .fold(ObjectBuilder::new(), |o, (name, schema)| o.property(name, schema).required(name))
            .into()
    };
    Some(match op.path {
        "/api/v1/users" => object(vec![("name", string()), ("role", named::<crate::auth::Role>(schemas))]),
        "/api/v1/tokens" => object(vec![
            ("id", integer()),
            ("name", string()),
            ("role", named::<crate::auth::Role>(schemas)),
            ("token", string()),
            ("note", string()),
        ]),
        "/api/v1/users/{name}/delete" => object(vec![("removed", string())]),
        "/api/v1/users/{name}/password" => object(vec![("name", string()), ("sessions_ended", integer())]),
        "/api/v1/users/{name}/role" => object(vec![("name", string()), ("role", named::<crate::auth::Role>(schemas))]),
        "/api/v1/tokens/{id}/revoke" => object(vec![("revoked", integer())]),
        "/api/v1/alerts/rules" | "/api/v1/alerts/rules/{id}" => stored_rule(schemas),
        "/api/v1/alerts/rules/{id}/delete" => object(vec![("deleted", string())]),
        "/api/v1/silences" => named::<crate::alerts::store::Silence>(schemas),
        "/api/v1/jobs/{id}/cancel" => named::<JobStatus>(schemas),
        "/api/v1/queues/{broker}/{vhost}/{queue}/snapshot" => named::<dlq::snapshot::SnapshotAnswer>(schemas),
        "/api/v1/queues/{broker}/{vhost}/{queue}/requeue" | "/api/v1/queues/{broker}/{vhost}/{queue}/delete" => {
            object(vec![("job", named::<JobStatus>(schemas)), ("status_url", string()), ("page_url", string())])
        }
        "/api/v1/queues/{broker}/{vhost}/{queue}/custody/start" => {
            object(vec![("in_custody", bool::schema()), ("audit_id", integer())])
        }
        "/api/v1/queues/{broker}/{vhost}/{queue}/custody/release" => object(vec![
            ("in_custody", bool::schema()),
            ("audit_id", integer()),
            ("job", nullable(named::<JobStatus>(schemas))),
        ]),
        "/api/v1/queues/{broker}/{vhost}/{queue}/custody/replay" => {
            object(vec![("audit_id", integer()), ("job", nullable(named::<JobStatus>(schemas))), ("follow", string())])
        }
        "/api/v1/queues/{broker}/{vhost}/{queue}/custody/{id}/delete" => {
            object(vec![("deleted", integer()), ("audit_id", integer())])
        }
        // A purge that the broker refused is a 502 with the error and `audit_id`.
        "/api/v1/queues/{broker}/{vhost}/{queue}/purge" => {
            object(vec![("outcome", constant("done")), ("purged", integer()), ("audit_id", integer())])
        }
        "/api/v1/alerts/rules/preview" => object(vec![
            ("matches", integer()),
            ("holding", integer()),
            ("queues", ArrayBuilder::new().items(preview_row(schemas)).into()),
        ]),
        "/api/v1/silences/{id}/expire" => object(vec![("expired", integer())]),
        "/api/v1/brokers/{broker}/advice/acknowledge" => {
            named::<crate::web::brokers::advisor_actions::Acknowledged>(schemas)
        }
        "/api/v1/brokers/{broker}/advice/unacknowledge" => {
            named::<crate::web::brokers::advisor_actions::Unacknowledged>(schemas)
        }
        // A policy the broker refused is a 502 with the error and `audit_id`.
        "/api/v1/brokers/{broker}/advice/apply" => named::<crate::web::brokers::advisor_actions::Applied>(schemas),
        // A delivery that failed is a 502 with the error and `outcome: "failed"`; `http_status`
        // is `null` for a channel that answers no HTTP status.
        "/api/v1/notifications/channels/{id}/test" => {
            object(vec![("outcome", constant("sent")), ("http_status", nullable(integer()))])
        }
        "/api/v1/queues/{broker}/{vhost}/{queue}/custody/{id}/edit" => object(vec![
            ("audit_id", integer()),
            ("to", string()),
            ("diff", named::<crate::dlq::custody::EditDiff>(schemas)),
        ]),
        IMPORT => object(vec![("imported", integer()), ("audit_id", integer())]),
        _ => return None,
    })
}

/// The JSON request bodies, from the types the handlers parse; `None` for the POSTs that read no
/// body (`WITHOUT_BODY`) and for the import, whose JSON lines are described in `operation`.
fn request_body(op: &Operation, schemas: &mut Vec<(String, RefOr<Schema>)>) -> Option<RefOr<Schema>> {
    use crate::web::access::accounts::{NewPassword, NewRole, NewTokenRequest, NewUser};
    if op.method != HttpMethod::Post {
        return None;
    }
    Some(match op.path {
        "/api/v1/users" => named::<NewUser>(schemas),
        "/api/v1/users/{name}/password" => named::<NewPassword>(schemas),
        "/api/v1/users/{name}/role" => named::<NewRole>(schemas),
        "/api/v1/tokens" => named::<NewTokenRequest>(schemas),
        "/api/v1/alerts/rules" | "/api/v1/alerts/rules/{id}" | "/api/v1/alerts/rules/preview" => {
            named::<crate::alerts::Rule>(schemas)
        }
        "/api/v1/queues/{broker}/{vhost}/{queue}/snapshot" => named::<dlq::snapshot::TakeRequest>(schemas),
        "/api/v1/silences" => named::<crate::alerts::store::Silence>(schemas),
        "/api/v1/brokers/{broker}/advice/acknowledge" => {
            named::<crate::web::brokers::advisor_actions::AcknowledgeRequest>(schemas)
        }
        "/api/v1/brokers/{broker}/advice/unacknowledge" => {
            named::<crate::web::brokers::advisor_actions::FindingKey>(schemas)
        }
        "/api/v1/brokers/{broker}/advice/apply" => named::<crate::web::brokers::advisor_actions::ApplyRequest>(schemas),
        "/api/v1/queues/{broker}/{vhost}/{queue}/requeue" => named::<crate::dlq::jobs::MoveRequest>(schemas),
        // `actions::DeleteRequest`: only a selection (the target is none).
        "/api/v1/queues/{broker}/{vhost}/{queue}/delete" => ObjectBuilder::new()
            .property("selection", named::<crate::dlq::jobs::Choice>(schemas))
            .required("selection")
            .into(),
        "/api/v1/queues/{broker}/{vhost}/{queue}/custody/replay" => {
            named::<crate::dlq::custody::ReplayRequest>(schemas)
        }
        "/api/v1/queues/{broker}/{vhost}/{queue}/custody/{id}/edit" => named::<crate::dlq::custody::Edit>(schemas),
        _ => return None,
    })
}

/// A rule with where it comes from (`store::StoredRule`: the rule flattened, and `source`).
/// Put together here rather than derived: `Rule` refuses unknown fields, which its schema says
/// as `additionalProperties: false`, and inside `allOf` that would refuse `source` too.
fn stored_rule(schemas: &mut Vec<(String, RefOr<Schema>)>) -> RefOr<Schema> {
    use crate::alerts::{store::Source, Rule};
    let mut rule = Rule::schema();
    Rule::schemas(schemas);
    if let RefOr::T(Schema::Object(object)) = &mut rule {
        object.additional_properties = None;
    }
    let source = ObjectBuilder::new().property("source", named::<Source>(schemas)).required("source");
    schemas.push(("StoredRule".into(), AllOfBuilder::new().item(rule).item(source).into()));
    Ref::from_schema_name("StoredRule").into()
}

/// A row of a rule's preview (`alerts::rules::PreviewRow`): a queue or broker the rule covers,
/// its value now (`null`: the broker did not give it) and whether the condition holds.
fn preview_row(schemas: &mut Vec<(String, RefOr<Schema>)>) -> RefOr<Schema> {
    ObjectBuilder::new()
        .property("key", named::<crate::alerts::AlertKey>(schemas))
        .required("key")
        .property("value", nullable(f64::schema()))
        .required("value")
        .property("holds", bool::schema())
        .required("holds")
        .into()
}

/// The one string `value`.
fn constant(value: &str) -> RefOr<Schema> {
    ObjectBuilder::new().schema_type(Type::String).enum_values(Some([value])).into()
}

/// `T` or `null`.
fn nullable(schema: RefOr<Schema>) -> RefOr<Schema> {
    OneOfBuilder::new().item(schema).item(ObjectBuilder::new().schema_type(Type::Null)).into()
}

/// This description: an OpenAPI 3.1 document, of which the keys every document has are checked
/// here (the whole shape is OpenAPI's own schema, <https://spec.openapis.org/oas/3.1/schema>).
fn openapi_document() -> RefOr<Schema> {
    ObjectBuilder::new()
        .property("openapi", ObjectBuilder::new().schema_type(Type::String).enum_values(Some(["3.1.0"])))
        .required("openapi")
        .property("info", ObjectBuilder::new().schema_type(Type::Object))
        .required("info")
        .property("paths", ObjectBuilder::new().schema_type(Type::Object))
        .required("paths")
        .into()
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
    let success = match op.path {
        "/api/v1/alerts/rules/export" => ResponseBuilder::new()
            .description("The rules as TOML, as `[[alerts]]` tables of the configuration file")
            .content("application/toml", ContentBuilder::new().schema(Some(String::schema())).build()),
        "/api/v1/queues/{broker}/{vhost}/{queue}/custody/export" => ResponseBuilder::new()
            .description("The held messages, one JSON object a line")
            .content("application/x-ndjson", ContentBuilder::new().schema(Some(String::schema())).build()),
        _ => {
            // An operation not typed is any JSON value, which `tests/openapi.rs` refuses.
            let schema =
                answer_schema(op, schemas).or_else(|| post_answer(op, schemas)).unwrap_or_else(|| any_value().into());
            ResponseBuilder::new()
                .description("OK")
                .content("application/json", ContentBuilder::new().schema(Some(schema)).build())
        }
    }
    .build();
    builder = builder.response(success_status(op), success);
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
        let body = match (request_body(op, schemas), op.path) {
            (Some(schema), _) => Some(
                RequestBodyBuilder::new()
                    .description(Some("A JSON object; the pages send the same fields as a form"))
                    .content("application/json", ContentBuilder::new().schema(Some(schema)).build()),
            ),
            // Read by hand: one JSON object a line, as the export writes them.
            (None, IMPORT) => Some(
                RequestBodyBuilder::new()
                    .description(Some("The messages as JSON lines, one object a line, as the export writes them"))
                    .content("application/x-ndjson", ContentBuilder::new().schema(Some(String::schema())).build()),
            ),
            // Anything else is any JSON value, which `tests/openapi.rs` refuses.
            (None, path) if !WITHOUT_BODY.contains(&path) => Some(
                RequestBodyBuilder::new()
                    .content("application/json", ContentBuilder::new().schema(Some(any_value())).build()),
            ),
            (None, _) => None,
        };
        if let Some(body) = body {
            builder = builder.request_body(Some(body.required(Some(Required::True)).build()));
        }
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
        "/api/v1/brokers/{broker}/advice/apply" => brokers::advisor_actions::FindingKey::into_params(query),
        "/api/v1/alerts/history" | "/api/v1/notifications/deliveries" => alerts::api::Limit::into_params(query),
        "/api/v1/queues/{broker}/{vhost}/{queue}/custody" => {
            let mut parameters = crate::dlq::message::Filter::into_params(query);
            parameters.extend(dlq::custody_api::ListQuery::into_params(query));
            parameters
        }
        "/api/v1/queues/{broker}/{vhost}/{queue}/custody/export" => crate::dlq::message::Filter::into_params(query),
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
    use std::collections::BTreeMap;

    /// Two types by one schema name would leave one of them described as the other (the
    /// components are a map by name): each name stands for one schema.
    #[test]
    fn each_component_name_is_one_schema() {
        let mut schemas = Vec::new();
        for op in super::OPERATIONS {
            super::answer_schema(op, &mut schemas);
            super::post_answer(op, &mut schemas);
            super::request_body(op, &mut schemas);
        }
        let mut by_name: BTreeMap<String, serde_json::Value> = BTreeMap::new();
        for (name, schema) in schemas {
            let schema = serde_json::to_value(schema).unwrap();
            let first = by_name.entry(name.clone()).or_insert_with(|| schema.clone());
            assert_eq!(*first, schema, "two schemas named {name}");
        }
        assert!(by_name.len() > 40, "{:?}", by_name.keys());
    }

    #[test]
    fn behind_a_base_path_the_server_is_that_path() {
        let doc = serde_json::to_value(super::document_at("/warren")).unwrap();
        assert_eq!(doc["servers"], serde_json::json!([{"url": "/warren"}]));
        let doc = serde_json::to_value(super::document_at("")).unwrap();
        assert!(doc.get("servers").is_none(), "{}", doc["servers"]);
    }

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

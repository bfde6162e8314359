//! The layers under the typed configuration: the file and the `WARREN_*` variables, merged as TOML
//! before `FileConfig` is read, so that every field the file has, the environment has too, and
//! both go through one validation. Secrets are resolved here (`*_file`, `*_env`), and every value
//! keeps where it came from for `check-config`.
//!
//! Naming: the TOML path upper-cased, `.` and `-` as `_`, after `WARREN_`: `WARREN_RETENTION_DAYS`,
//! `WARREN_AUTH_PROXY_HEADER`. Brokers and notification channels are named, not numbered:
//! `WARREN_BROKER_<NAME>_<FIELD>` (the names warren had before) and
//! `WARREN_NOTIFICATION_<ID>_<FIELD>`; `WARREN_BROKERS` and `WARREN_NOTIFICATIONS` add brokers and
//! channels by name to those of the file. Since the valid names are generated from the file, a
//! name with underscores (`prod_1`) is never split the wrong way, and a misspelt variable is
//! caught rather than ignored.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use toml::{Table, Value};

use super::{invalid, ConfigError};

/// The process environment, read once.
#[derive(Debug, Clone, Default)]
pub struct Environment(BTreeMap<String, String>);

impl Environment {
    pub fn from_process() -> Environment {
        Environment(
            std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))).collect(),
        )
    }

    /// A variable's value; an empty one counts as unset, as a compose file's `X=` means.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str).filter(|v| !v.is_empty())
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for Environment {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        Environment(iter.into_iter().map(|(k, v)| (k.into(), v.into())).collect())
    }
}

/// Variables warren reads outside the configuration (`clap`), and those that add named entries.
const OTHER_VARIABLES: &[&str] = &["WARREN_CONFIG", "WARREN_LOG_FORMAT", "WARREN_BROKERS", "WARREN_NOTIFICATIONS"];
/// The test suite's, the benchmarks' and the scripts' own variables share the prefix; they are
/// inherited by every warren the tests start, so they must not stop it. `WARREN_BUILD_*` are
/// build.rs's, which cargo also sets for the programs it runs.
const RESERVED_PREFIXES: &[&str] = &["WARREN_TEST_", "WARREN_BENCH_", "WARREN_FUZZ_", "WARREN_IMAGE_", "WARREN_BUILD_"];
/// `WARREN_COMMIT` and `WARREN_COMMIT_DATE` are read at build time (build.rs); CI exports them for
/// the whole run.
const RESERVED_VARIABLES: &[&str] = &["WARREN_BIN", "WARREN_TLS_DIR", "WARREN_COMMIT", "WARREN_COMMIT_DATE"];

/// Where one effective value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Default,
    /// The configuration file.
    File,
    Env(String),
    Flag(&'static str),
    /// A secret read from a file whose path came from `named_by`.
    SecretFile {
        path: PathBuf,
        named_by: Box<Source>,
    },
    /// A secret read from a variable whose name came from `named_by`.
    SecretEnv {
        var: String,
        named_by: Box<Source>,
    },
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::File => f.write_str("file"),
            Source::Env(var) => write!(f, "env {var}"),
            Source::Flag(flag) => write!(f, "flag {flag}"),
            Source::SecretFile { path, named_by } => write!(f, "read from {} (path from {named_by})", path.display()),
            Source::SecretEnv { var, named_by } => write!(f, "env {var} (named by {named_by})"),
        }
    }
}

/// Where each value came from, by its path (`brokers[0].user`, as errors name fields).
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// The configuration file, if one was read.
    pub file: Option<PathBuf>,
    values: BTreeMap<String, Source>,
}

impl Sources {
    pub fn set(&mut self, path: impl Into<String>, source: Source) {
        self.values.insert(path.into(), source);
    }

    /// The source of `path`, or of the nearest enclosing value set as a whole (a list of alert
    /// rules from one variable, say); `Default` when nothing set it.
    pub fn get(&self, path: &str) -> &Source {
        let mut path = path;
        loop {
            if let Some(source) = self.values.get(path) {
                return source;
            }
            match path.rfind(['.', '[']) {
                Some(end) => path = &path[..end],
                None => return &Source::Default,
            }
        }
    }
}

/// How a variable's text becomes a TOML value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Integer,
    Float,
    Bool,
    /// Comma-separated.
    List,
    /// A literal, or `_FILE` / `_ENV` beside it.
    Secret,
    /// A TOML value as a whole: `WARREN_CUSTODY='[{queue = "*.dlq"}]'`.
    Toml,
}

use Kind::*;

const TOP: &[(&str, Kind)] = &[
    ("listen", Text),
    ("database", Text),
    ("database_url", Secret),
    ("public_url", Text),
    ("retention_days", Integer),
    ("minute_retention_days", Integer),
    ("raw_retention_hours", Integer),
    ("alert_repeat_secs", Integer),
    ("lease_secs", Integer),
    ("alerts", Toml),
    ("custody", Toml),
    ("auth.session_ttl_secs", Integer),
    ("auth.session_idle_secs", Integer),
    ("auth.secure_cookie", Bool),
    ("auth.proxy.header", Text),
    ("auth.proxy.role_header", Text),
    ("auth.proxy.default_role", Text),
    ("auth.proxy.trusted", List),
];

const BROKER: &[(&str, Kind)] = &[
    ("management_url", Text),
    ("management_urls", List),
    ("user", Text),
    ("password", Secret),
    ("amqp_url", Text),
    ("vhosts_include", List),
    ("vhosts_exclude", List),
    ("poll_interval_secs", Integer),
    ("request_timeout_secs", Integer),
    ("prometheus_url", Text),
    ("broker_cpu_budget", Float),
    ("stats_min_interval_secs", Integer),
    ("stats_max_interval_secs", Integer),
    ("source_recheck_secs", Integer),
    ("prometheus_head_timestamps", Bool),
    ("scheduled_hold_limit_secs", Integer),
    ("dlq_growth_window_secs", Integer),
];

/// Under `tls` and under each of its endpoints.
const TLS: &[&str] = &["ca_file", "client_cert_file", "client_key_file", "server_name"];
const TLS_ENDPOINTS: &[&str] = &["management", "prometheus", "amqp"];

/// Every channel field of every type: a field the channel's type does not take is refused when
/// the channel is read, with the field's name.
const CHANNEL: &[(&str, Kind)] = &[
    ("name", Text),
    ("type", Text),
    ("min_severity", Text),
    ("url", Secret),
    ("host", Text),
    ("port", Integer),
    ("security", Text),
    ("user", Text),
    ("password", Secret),
    ("from", Text),
    ("to", List),
];

/// The secrets: these fields take `<field>`, `<field>_file` or `<field>_env`, one of them.
/// Top-level secrets: a PostgreSQL URL holds its password.
const TOP_SECRETS: &[&str] = &["database_url"];
const BROKER_SECRETS: &[&str] = &["password"];
const CHANNEL_SECRETS: &[&str] = &["url", "password"];

/// One variable and the value it sets.
#[derive(Debug, Clone)]
struct Setting {
    var: String,
    /// Which list entry (`brokers`, `notifications`) and its index, if any; the index may be
    /// one past the end (the implicit `local` broker, not in the file).
    entry: Option<(&'static str, usize)>,
    /// Dotted path inside the entry (or the root).
    key: String,
    kind: Kind,
}

impl Setting {
    fn path(&self) -> String {
        match self.entry {
            Some((list, index)) => format!("{list}[{index}].{}", self.key),
            None => self.key.clone(),
        }
    }
}

fn var_part(text: &str) -> String {
    text.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect()
}

/// The merged table the typed configuration is read from, and where each value came from.
pub(super) fn layer(
    file: Option<(&Path, &str)>,
    env: &Environment,
    resolve: bool,
) -> Result<(Table, Sources), ConfigError> {
    let mut sources = Sources { file: file.map(|(path, _)| path.to_path_buf()), values: BTreeMap::new() };
    let mut table = match file {
        Some((_, text)) => parse_table(text)?,
        None => Table::new(),
    };
    record_leaves(&Value::Table(table.clone()), "", &mut sources);

    declare_entries(&mut table, env, "WARREN_BROKERS", "brokers", "name", &mut sources)?;
    declare_entries(&mut table, env, "WARREN_NOTIFICATIONS", "notifications", "id", &mut sources)?;

    let settings = settings_for(&table)?;
    let mut given: BTreeMap<String, (&Setting, &str)> = BTreeMap::new();
    for setting in settings.values() {
        if let Some(value) = env.get(&setting.var) {
            given.insert(setting.var.clone(), (setting, value));
        }
    }
    // A secret set in the environment replaces the file's, whatever form either has.
    let mut replaced: BTreeSet<String> = BTreeSet::new();
    for (setting, value) in given.values() {
        let (base, _) = secret_base(&setting.key);
        if setting.kind == Secret {
            let base_path = Setting { key: base.to_string(), ..(*setting).clone() }.path();
            if !replaced.insert(base_path.clone()) {
                return Err(invalid(
                    base_path,
                    format!("set by more than one of {0}, {0}_FILE and {0}_ENV; give one", setting_base_var(setting)),
                ));
            }
            let entry = entry_table(&mut table, setting.entry);
            for form in [base.to_string(), format!("{base}_file"), format!("{base}_env")] {
                entry.remove(&form);
            }
        }
        let parsed = parse_value(setting, value)?;
        set_path(entry_table(&mut table, setting.entry), &setting.key, parsed);
        let path = setting.path();
        if setting.kind == Toml {
            // The whole list is replaced: the file's entries are no source of anything now.
            sources.values.retain(|key, _| !key.starts_with(&format!("{path}[")));
        }
        sources.set(path, Source::Env(setting.var.clone()));
    }

    // Variables the configuration names as secrets (`password_env = "WARREN_PROD_PASSWORD"`, as
    // the README's example) are known too.
    let mut named: BTreeSet<String> = BTreeSet::new();
    for_each_secret(&mut table, |_, entry, field| {
        if let Some(Value::String(var)) = entry.get(&format!("{field}_env")) {
            named.insert(var.clone());
        }
        Ok(())
    })?;
    let known: BTreeSet<&str> = settings.keys().map(String::as_str).chain(OTHER_VARIABLES.iter().copied()).collect();
    for var in env.0.keys().filter(|k| k.starts_with("WARREN_")) {
        let reserved =
            RESERVED_PREFIXES.iter().any(|p| var.starts_with(p)) || RESERVED_VARIABLES.contains(&var.as_str());
        if known.contains(var.as_str()) || named.contains(var) || reserved {
            continue;
        }
        let nearest = known.iter().min_by_key(|k| edit_distance(var, k)).copied().unwrap_or("WARREN_CONFIG");
        return Err(invalid(var.clone(), format!("no such setting; did you mean {nearest}?")));
    }

    if resolve {
        resolve_secrets(&mut table, env, &mut sources)?;
    }
    Ok((table, sources))
}

fn setting_base_var(setting: &Setting) -> String {
    let var = &setting.var;
    var.strip_suffix("_FILE").or_else(|| var.strip_suffix("_ENV")).unwrap_or(var).to_string()
}

/// `password_file` -> (`password`, "_file"); other keys unchanged.
fn secret_base(key: &str) -> (&str, &str) {
    for suffix in ["_file", "_env"] {
        if let Some(base) = key.strip_suffix(suffix) {
            return (base, suffix);
        }
    }
    (key, "")
}

/// The variables of the configuration as it stands: top-level and `auth`, then each broker and
/// channel by name.
fn settings_for(table: &Table) -> Result<BTreeMap<String, Setting>, ConfigError> {
    let mut settings: BTreeMap<String, Setting> = BTreeMap::new();
    let mut add = |setting: Setting| -> Result<(), ConfigError> {
        if let Some(other) = settings.get(&setting.var) {
            return Err(invalid(
                setting.path(),
                format!("{} and {} would both be set by {}; rename one", other.path(), setting.path(), setting.var),
            ));
        }
        settings.insert(setting.var.clone(), setting);
        Ok(())
    };
    let expand = |prefix: &str, entry: Option<(&'static str, usize)>, key: &str, kind: Kind| -> Vec<Setting> {
        let var = format!("{prefix}{}", var_part(key));
        if kind != Secret {
            return vec![Setting { var, entry, key: key.to_string(), kind }];
        }
        vec![
            Setting { var: var.clone(), entry, key: key.to_string(), kind },
            Setting { var: format!("{var}_FILE"), entry, key: format!("{key}_file"), kind },
            Setting { var: format!("{var}_ENV"), entry, key: format!("{key}_env"), kind },
        ]
    };
    for (key, kind) in TOP {
        for s in expand("WARREN_", None, key, *kind) {
            add(s)?;
        }
    }

    let names = |list: &str, key: &str, default: Option<&str>| -> Vec<String> {
        match table.get(list).and_then(Value::as_array) {
            Some(entries) if !entries.is_empty() => entries
                .iter()
                .map(|e| e.get(key).and_then(Value::as_str).or(default).unwrap_or_default().to_string())
                .collect(),
            // No brokers in the file: the one warren watches by default, `local`.
            _ => default.map(|d| vec![d.to_string()]).unwrap_or_default(),
        }
    };
    let broker_names = names("brokers", "name", Some("local"));
    for (index, name) in broker_names.iter().enumerate() {
        // A name used twice is refused with its field when the brokers are read.
        if broker_names[..index].contains(name) {
            continue;
        }
        let prefix = format!("WARREN_BROKER_{}_", var_part(name));
        let entry = Some(("brokers", index));
        let mut keys: Vec<(String, Kind)> = BROKER.iter().map(|(k, kind)| (k.to_string(), *kind)).collect();
        keys.extend(TLS.iter().map(|k| (format!("tls.{k}"), Text)));
        for endpoint in TLS_ENDPOINTS {
            keys.extend(TLS.iter().map(|k| (format!("tls.{endpoint}.{k}"), Text)));
        }
        for (key, kind) in keys {
            for s in expand(&prefix, entry, &key, kind) {
                add(s)?;
            }
        }
    }
    let channel_ids = names("notifications", "id", None);
    for (index, id) in channel_ids.iter().enumerate() {
        if id.is_empty() || channel_ids[..index].contains(id) {
            continue;
        }
        let prefix = format!("WARREN_NOTIFICATION_{}_", var_part(id));
        for (key, kind) in CHANNEL {
            for s in expand(&prefix, Some(("notifications", index)), key, *kind) {
                add(s)?;
            }
        }
    }
    Ok(settings)
}

/// `WARREN_BROKERS=prod,staging`: entries with these names, added after the file's unless the
/// file has them already.
fn declare_entries(
    table: &mut Table,
    env: &Environment,
    var: &str,
    list: &str,
    key: &str,
    sources: &mut Sources,
) -> Result<(), ConfigError> {
    let Some(text) = env.get(var) else { return Ok(()) };
    let entries = table.entry(list).or_insert_with(|| Value::Array(Vec::new()));
    let Value::Array(entries) = entries else { return Err(invalid(list, "must be a list of tables")) };
    for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        if entries.iter().any(|e| e.get(key).and_then(Value::as_str) == Some(name)) {
            continue;
        }
        let mut entry = Table::new();
        entry.insert(key.to_string(), Value::String(name.to_string()));
        if list == "notifications" {
            // A channel's display name; the id until a variable says otherwise.
            entry.insert("name".to_string(), Value::String(name.to_string()));
        }
        entries.push(Value::Table(entry));
        sources.set(format!("{list}[{}]", entries.len() - 1), Source::Env(var.to_string()));
    }
    Ok(())
}

fn parse_value(setting: &Setting, text: &str) -> Result<Value, ConfigError> {
    let field = || format!("{} ({})", setting.path(), setting.var);
    Ok(match setting.kind {
        Text | Secret => Value::String(text.to_string()),
        Integer => Value::Integer(
            text.trim().parse().map_err(|_| invalid(field(), format!("{text:?} is not a whole number")))?,
        ),
        Float => Value::Float(text.trim().parse().map_err(|_| invalid(field(), format!("{text:?} is not a number")))?),
        Bool => match text.trim() {
            "true" | "1" => Value::Boolean(true),
            "false" | "0" => Value::Boolean(false),
            other => return Err(invalid(field(), format!("{other:?} is not true or false"))),
        },
        List => Value::Array(
            text.split(',').map(str::trim).filter(|s| !s.is_empty()).map(|s| Value::String(s.to_string())).collect(),
        ),
        Toml => {
            let wrapped: Table = format!("value = {text}").parse().map_err(|e: toml::de::Error| {
                invalid(field(), format!("not a TOML value: {}", e.message().lines().next().unwrap_or("syntax error")))
            })?;
            wrapped.get("value").cloned().unwrap_or(Value::Array(Vec::new()))
        }
    })
}

/// The table of list entry `entry` (created, with those before it, if missing), or the root.
fn entry_table<'t>(table: &'t mut Table, entry: Option<(&str, usize)>) -> &'t mut Table {
    let Some((list, index)) = entry else { return table };
    let value = table.entry(list).or_insert_with(|| Value::Array(Vec::new()));
    if !value.is_array() {
        *value = Value::Array(Vec::new());
    }
    let entries = value.as_array_mut().expect("made an array above");
    while entries.len() <= index {
        entries.push(Value::Table(Table::new()));
    }
    if !entries[index].is_table() {
        entries[index] = Value::Table(Table::new());
    }
    entries[index].as_table_mut().expect("made a table above")
}

fn set_path(table: &mut Table, key: &str, value: Value) {
    match key.split_once('.') {
        None => {
            table.insert(key.to_string(), value);
        }
        Some((first, rest)) => {
            let inner = table.entry(first).or_insert_with(|| Value::Table(Table::new()));
            if !inner.is_table() {
                *inner = Value::Table(Table::new());
            }
            set_path(inner.as_table_mut().expect("made a table above"), rest, value);
        }
    }
}

/// Calls `f(path, entry, field)` for every secret field of every broker and channel.
fn for_each_secret(
    table: &mut Table,
    mut f: impl FnMut(String, &mut Table, &str) -> Result<(), ConfigError>,
) -> Result<(), ConfigError> {
    for field in TOP_SECRETS {
        f(String::new(), table, field)?;
    }
    for (list, fields) in [("brokers", BROKER_SECRETS), ("notifications", CHANNEL_SECRETS)] {
        let Some(Value::Array(entries)) = table.get_mut(list) else { continue };
        for (index, entry) in entries.iter_mut().enumerate() {
            let Value::Table(entry) = entry else { continue };
            for field in fields {
                f(format!("{list}[{index}]"), entry, field)?;
            }
        }
    }
    Ok(())
}

/// Replaces each `<field>_file` and `<field>_env` by the literal it names. The errors name the
/// field, the file or the variable, never the value.
fn resolve_secrets(table: &mut Table, env: &Environment, sources: &mut Sources) -> Result<(), ConfigError> {
    for_each_secret(table, |entry_path, entry, field| {
        let forms: Vec<String> = [field.to_string(), format!("{field}_file"), format!("{field}_env")]
            .into_iter()
            .filter(|form| entry.contains_key(form))
            .collect();
        let under = |key: &str| if entry_path.is_empty() { key.to_string() } else { format!("{entry_path}.{key}") };
        let path = under(field);
        if forms.len() > 1 {
            return Err(invalid(
                path,
                format!("give one of {field}, {field}_file and {field}_env, not {}", forms.join(" and ")),
            ));
        }
        let Some(form) = forms.first() else { return Ok(()) };
        if form == field {
            return Ok(());
        }
        let form_path = under(form);
        let Some(Value::String(named)) = entry.remove(form) else {
            return Err(invalid(form_path, "must be a string"));
        };
        let named_by = Box::new(sources.get(&form_path).clone());
        let (value, source) = if form.ends_with("_file") {
            let file = PathBuf::from(&named);
            (read_secret_file(&form_path, &file)?, Source::SecretFile { path: file, named_by })
        } else {
            let value = env
                .get(&named)
                .ok_or_else(|| invalid(&form_path, format!("environment variable {named} is not set")))?
                .to_string();
            (value, Source::SecretEnv { var: named, named_by })
        };
        entry.insert(field.to_string(), Value::String(value));
        sources.set(path, source);
        Ok(())
    })
}

/// A secret file's content without the one line end editors and `echo` add, which is not part of
/// the secret (`printf` writes none; both work).
pub(super) fn read_secret_file(field: &str, path: &Path) -> Result<String, ConfigError> {
    let text =
        std::fs::read_to_string(path).map_err(|e| invalid(field, format!("cannot read {}: {e}", path.display())))?;
    let text = text.strip_suffix('\n').map(|t| t.strip_suffix('\r').unwrap_or(t)).unwrap_or(&text);
    Ok(text.to_string())
}

fn parse_table(text: &str) -> Result<Table, ConfigError> {
    text.parse::<Table>().map_err(|e: toml::de::Error| {
        // toml's message spans several lines (with a source excerpt); keep the first, so the
        // error stays one line.
        let message = e.message().lines().next().unwrap_or("syntax error").to_string();
        let place = match e.span() {
            Some(span) => {
                let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
                format!("config file line {line}")
            }
            None => "config file".to_string(),
        };
        invalid(place, message)
    })
}

/// Every value of the file, by path, as `File`.
fn record_leaves(value: &Value, path: &str, sources: &mut Sources) {
    match value {
        Value::Table(table) => {
            for (key, inner) in table {
                let inner_path = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
                record_leaves(inner, &inner_path, sources);
            }
        }
        Value::Array(items) if items.iter().any(Value::is_table) => {
            for (index, item) in items.iter().enumerate() {
                record_leaves(item, &format!("{path}[{index}]"), sources);
            }
        }
        _ => sources.set(path, Source::File),
    }
}

/// Levenshtein distance, for the nearest valid name to a misspelt one.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (diagonal + usize::from(ca != *cb)).min(row[j] + 1).min(above + 1);
            diagonal = above;
        }
    }
    row[b.len()]
}

/// `check-config`'s TOML with each value's source after it (`listen = "..."  # env WARREN_LISTEN`).
pub fn annotate(text: &str, sources: &Sources) -> String {
    let mut out = String::with_capacity(text.len() * 2);
    let mut prefix = String::new();
    let mut arrays: BTreeMap<String, usize> = BTreeMap::new();
    let mut in_multiline = false;
    for line in text.lines() {
        out.push_str(line);
        let trimmed = line.trim();
        if in_multiline {
            in_multiline = !(trimmed.contains("\"\"\"") || trimmed.contains("'''"));
        } else if let Some(name) = trimmed.strip_prefix("[[").and_then(|s| s.strip_suffix("]]")) {
            let count = arrays.entry(name.to_string()).or_insert(0);
            prefix = format!("{name}[{count}]");
            *count += 1;
        } else if let Some(name) = trimmed.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            let (first, rest) = name.split_once('.').unwrap_or((name, ""));
            prefix = match arrays.get(first) {
                Some(count) => format!("{first}[{}]", count.saturating_sub(1)),
                None => first.to_string(),
            };
            if !rest.is_empty() {
                prefix = format!("{prefix}.{rest}");
            }
        } else if let Some((key, value)) = trimmed.split_once(" = ") {
            if !key.starts_with('#') {
                let path = if prefix.is_empty() { key.to_string() } else { format!("{prefix}.{key}") };
                out.push_str(&format!("  # {}", sources.get(&path)));
                in_multiline = value.starts_with("\"\"\"") || value.starts_with("'''");
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("WARREN_BROKR_LOCAL_USER", "WARREN_BROKER_LOCAL_USER"), 1);
    }

    #[test]
    fn one_line_end_is_trimmed_from_a_secret_file() {
        let dir = tempfile::tempdir().unwrap();
        for (content, expected) in
            [("pw\n", "pw"), ("pw\r\n", "pw"), ("pw", "pw"), ("pw\n\n", "pw\n"), (" pw \n", " pw ")]
        {
            let path = dir.path().join("secret");
            std::fs::write(&path, content).unwrap();
            assert_eq!(read_secret_file("x", &path).unwrap(), expected, "{content:?}");
        }
    }
}

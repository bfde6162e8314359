//! The layers of `src/` and their one-way doors (docs/design.md, "Layout of the code"): every
//! `crate::` path a file names must point to its own part or to a part below it. A new import
//! that runs upward, and so any import circle between parts, fails here with the file and line.
//! Inside `web/` the same holds between its shared modules and its wings (`WEB_LAYERS`), and
//! the files of one wing import one another without a circle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// From the bottom: each part may name the parts of earlier layers only. Within a layer, parts
/// do not name each other.
const LAYERS: &[(&str, &[&str])] = &[
    ("the configuration: plain data, imports nothing of warren's", &["config"]),
    ("the JSON form of times, which every answer type shares", &["times"]),
    ("what the broker says", &["broker"]),
    ("the values derived from it", &["metrics", "memory"]),
    ("what warren keeps: one interface, a SQLite and a PostgreSQL implementation", &["storage"]),
    ("the history in that database; which replica does which work", &["history", "replicas"]),
    ("the audit log in that database, and what warren knows now (in memory)", &["audit", "live"]),
    ("who may do what", &["auth"]),
    ("dead letters: snapshots, moves, custody", &["dlq"]),
    ("the pollers, which feed `live` and read the dead-letter wing's marks", &["poller"]),
    ("alerts, the advisor and the numbers to watch, over what the pollers found", &["alerts", "advisor", "numbers"]),
    ("the handles every handler shares", &["state"]),
    ("the pages and the API; the demo brokers", &["web", "demo"]),
    ("the binary", &["lib", "main"]),
];

fn layer_of(part: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, parts)| parts.contains(&part))
}

/// The top-level part a file of `src/` belongs to: `src/dlq/mover.rs` is `dlq`, `src/lib.rs`
/// is `lib`.
fn part_of(relative: &Path) -> String {
    let mut components = relative.components().map(|c| c.as_os_str().to_string_lossy().into_owned());
    let first = components.next().expect("a file");
    first.strip_suffix(".rs").map(str::to_string).unwrap_or(first)
}

/// The parts a file names through `crate::`, with the line of each: `crate::a::b`, and every
/// name at the top of `crate::{a::x, b}`.
fn named_parts(text: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    let line_at = |at: usize| text[..at].matches('\n').count() + 1;
    let mut rest = 0;
    while let Some(found) = text[rest..].find("crate::") {
        let at = rest + found;
        let after = &text[at + "crate::".len()..];
        rest = at + "crate::".len();
        // `$crate::` in macros and `some_crate::` are other crates' paths.
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| c == '$' || c == '_' || c.is_alphanumeric()) {
            continue;
        }
        if let Some(group) = after.strip_prefix('{') {
            let mut depth = 1;
            let mut item = String::new();
            let mut items = Vec::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                if depth == 0 {
                    break;
                }
                if c == ',' && depth == 1 {
                    items.push(std::mem::take(&mut item));
                } else {
                    item.push(c);
                }
            }
            items.push(item);
            for item in items {
                let name: String = item.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if !name.is_empty() && name != "self" {
                    out.push((name, line_at(at)));
                }
            }
        } else {
            let name: String = after.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if !name.is_empty() {
                out.push((name, line_at(at)));
            }
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src/ reads") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_import_points_down_the_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut upward = Vec::new();
    let mut unplaced = BTreeMap::new();
    for file in &files {
        let relative = file.strip_prefix(&src).expect("under src/");
        let from = part_of(relative);
        let Some(from_layer) = layer_of(&from) else {
            unplaced.insert(from.clone(), relative.display().to_string());
            continue;
        };
        let text = std::fs::read_to_string(file).expect("a source file reads");
        for (to, line) in named_parts(&text) {
            if to == from {
                continue;
            }
            match layer_of(&to) {
                Some(to_layer) if to_layer < from_layer => {}
                Some(_) => upward.push(format!("{}:{line}: {from} -> {to}", relative.display())),
                // Macros and items of the crate root (`crate::build_state`) belong to the binary's layer.
                None => upward.push(format!("{}:{line}: {from} -> {to} (crate root)", relative.display())),
            }
        }
    }
    assert!(unplaced.is_empty(), "parts of src/ in no layer of tests/layers.rs (place them): {unplaced:?}");
    assert!(
        upward.is_empty(),
        "{} imports run upward or sideways (tests/layers.rs lists the layers):\n{}",
        upward.len(),
        upward.join("\n")
    );
}

/// Inside `web/`, from the bottom: the modules every wing shares, then the wings (a folder
/// each) beside the pages that stand alone, then the description of the API, then the top,
/// which merges the routers (`mod`, that is `web/mod.rs`). A part names parts of earlier layers only, so the
/// wings never name each other.
const WEB_LAYERS: &[(&str, &[&str])] = &[
    (
        "imports nothing of web/: errors and their JSON form, how values read, page or fragment, where pages are",
        &["error", "format", "htmx", "links"],
    ),
    (
        "who is asking, request parameters, how old the data is, a broker or queue by name, the alerts firing",
        &["identity", "query", "freshness", "lookup", "firing"],
    ),
    ("an error as a page; what a role may read of a queue", &["error_page", "restricted"]),
    ("the wings, and the pages that stand alone", &["access", "alerts", "brokers", "dlq", "assets"]),
    (
        "the API described, from the types of every wing's answers; /metrics, with the advisor's findings",
        &["openapi", "prometheus"],
    ),
    ("the API reference page, from that description", &["api_reference"]),
    ("the documentation, which includes that page", &["docs"]),
    ("the routes merged (web/mod.rs)", &["mod"]),
];

fn web_layer_of(part: &str) -> Option<usize> {
    WEB_LAYERS.iter().position(|(_, parts)| parts.contains(&part))
}

/// A use tree from `at`: `a::b`, `a::{b, c::d}`, `*`; each path it names, as its segments.
fn use_tree(text: &[char], at: &mut usize) -> Vec<Vec<String>> {
    let skip_space = |at: &mut usize| {
        while *at < text.len() && text[*at].is_whitespace() {
            *at += 1;
        }
    };
    skip_space(at);
    if *at < text.len() && text[*at] == '{' {
        *at += 1;
        let mut paths = Vec::new();
        loop {
            skip_space(at);
            if *at >= text.len() || text[*at] == '}' {
                *at += 1;
                return paths;
            }
            let before = *at;
            paths.extend(use_tree(text, at));
            skip_space(at);
            if *at < text.len() && text[*at] == ',' {
                *at += 1;
            } else if *at == before {
                // Not a use tree after all (a `{` in a format string, say): stop here.
                *at += 1;
            }
        }
    }
    if *at < text.len() && text[*at] == '*' {
        *at += 1;
        return vec![vec!["*".to_string()]];
    }
    let start = *at;
    while *at < text.len() && (text[*at].is_alphanumeric() || text[*at] == '_') {
        *at += 1;
    }
    let name: String = text[start..*at].iter().collect();
    if name.is_empty() {
        return Vec::new();
    }
    if text.get(*at) == Some(&':') && text.get(*at + 1) == Some(&':') {
        *at += 2;
        let rest = use_tree(text, at);
        if rest.is_empty() {
            return vec![vec![name]];
        }
        return rest.into_iter().map(|p| std::iter::once(name.clone()).chain(p).collect()).collect();
    }
    vec![vec![name]]
}

/// The modules a file of `web/` declares (`mod x;`, `pub mod x;`): the names it uses bare.
fn child_modules(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter_map(|l| l.strip_prefix("pub ").or(l.strip_prefix("pub(crate) ")).unwrap_or(l).strip_prefix("mod "))
        .filter_map(|l| l.strip_suffix(';'))
        .map(str::to_string)
        .collect()
}

/// Every path a file names that starts with `crate::`, `super::`, `self::` or one of its own
/// modules, made absolute (`["web", "dlq", "page", "take"]`), with its line. `module` is the
/// file's own path (`["web", "dlq", "page"]`). A `#[cfg(test)] mod` at the end of a file is one
/// module deeper, so its `super::*` is the file itself.
fn module_paths(text: &str, module: &[String]) -> Vec<(Vec<String>, usize)> {
    let children = child_modules(text);
    let tests_at = text.find("#[cfg(test)]\nmod ").unwrap_or(text.len());
    let chars: Vec<char> = text.chars().collect();
    let mut line = 1;
    let mut byte = 0;
    let mut out = Vec::new();
    let mut at = 0;
    while at < chars.len() {
        let c = chars[at];
        let starts_path = (c.is_alphabetic() || c == '_')
            && (at == 0 || !(chars[at - 1].is_alphanumeric() || matches!(chars[at - 1], '_' | ':' | '$')));
        if !starts_path {
            if c == '\n' {
                line += 1;
            }
            byte += c.len_utf8();
            at += 1;
            continue;
        }
        let mut end = at;
        let paths = use_tree(&chars, &mut end);
        let here = line;
        for c in &chars[at..end.min(chars.len())] {
            if *c == '\n' {
                line += 1;
            }
            byte += c.len_utf8();
        }
        at = end.max(at + 1);
        let mut own: Vec<String> = module.to_vec();
        if byte > tests_at {
            own.push("tests".to_string());
        }
        for path in paths {
            // `pub(super)`, `pub(crate)`: a visibility, not a path.
            let [first, _, ..] = path.as_slice() else { continue };
            let absolute: Vec<String> = match first.as_str() {
                "crate" => path[1..].to_vec(),
                "super" | "self" => {
                    let mut base = own.clone();
                    let mut rest = &path[..];
                    while rest.first().is_some_and(|s| s == "super") {
                        base.pop();
                        rest = &rest[1..];
                    }
                    if rest.first().is_some_and(|s| s == "self") {
                        rest = &rest[1..];
                    }
                    base.into_iter().chain(rest.iter().cloned()).collect()
                }
                name if children.iter().any(|c| c == name) => {
                    module.iter().cloned().chain(path.iter().cloned()).collect()
                }
                _ => continue,
            };
            out.push((absolute, here));
        }
    }
    out
}

/// A file's module path: `src/web/dlq/page.rs` is `["web", "dlq", "page"]`, a `mod.rs` its
/// folder's.
fn module_of(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> =
        relative.with_extension("").components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// The part of `web/` a module path is in: the shared module or wing it names, or `mod` for
/// `web/mod.rs` and its items. `parts` are the names of `web/`'s files and folders.
fn web_part(path: &[String], parts: &BTreeSet<String>) -> String {
    match path.get(1) {
        Some(part) if parts.contains(part) => part.clone(),
        _ => "mod".to_string(),
    }
}

/// The file of a wing a module path is in (`page` of `web/dlq/page.rs`), or `mod` for the
/// wing's `mod.rs` and its items.
fn wing_file(path: &[String], files: &BTreeSet<String>) -> String {
    match path.get(2) {
        Some(file) if files.contains(file) => file.clone(),
        _ => "mod".to_string(),
    }
}

/// The import circles between one wing's files, each as the imports that close it.
fn circles(edges: &BTreeMap<String, Vec<(String, String)>>) -> Vec<String> {
    /// Depth first; `stack` holds each file on the way with the import that led to it.
    fn visit(
        file: &str,
        edges: &BTreeMap<String, Vec<(String, String)>>,
        stack: &mut Vec<(String, String)>,
        done: &mut BTreeSet<String>,
        out: &mut Vec<String>,
    ) {
        for (to, at) in edges.get(file).into_iter().flatten() {
            if let Some(start) = stack.iter().position(|(f, _)| f == to) {
                let mut imports: Vec<&str> = stack[start + 1..].iter().map(|(_, at)| at.as_str()).collect();
                imports.push(at);
                out.push(imports.join(" -> "));
            } else if !done.contains(to) {
                stack.push((to.clone(), at.clone()));
                visit(to, edges, stack, done, out);
                stack.pop();
            }
        }
        done.insert(file.to_string());
    }
    let mut out = Vec::new();
    let mut done = BTreeSet::new();
    for file in edges.keys() {
        if !done.contains(file) {
            visit(file, edges, &mut vec![(file.clone(), String::new())], &mut done, &mut out);
        }
    }
    out
}

#[test]
fn inside_web_the_wings_and_shared_modules_form_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let web = src.join("web");
    let mut files = Vec::new();
    rust_files(&web, &mut files);
    files.sort();
    let parts: BTreeSet<String> = std::fs::read_dir(&web)
        .expect("src/web/ reads")
        .map(|e| e.expect("an entry").path())
        .map(|p| p.file_stem().expect("a name").to_string_lossy().into_owned())
        .filter(|name| name != "mod")
        .collect();
    let unplaced: Vec<&String> = parts.iter().filter(|p| web_layer_of(p).is_none()).collect();
    assert!(
        unplaced.is_empty(),
        "parts of src/web/ in no layer of WEB_LAYERS in tests/layers.rs (place them): {unplaced:?}"
    );

    let mut wrong = Vec::new();
    // Per wing: file -> [(file it names, where)].
    let mut wings: BTreeMap<String, BTreeMap<String, Vec<(String, String)>>> = BTreeMap::new();
    for file in &files {
        let relative = file.strip_prefix(&src).expect("under src/");
        let module = module_of(relative);
        let from = web_part(&module, &parts);
        let from_layer = web_layer_of(&from).expect("placed above");
        let text = std::fs::read_to_string(file).expect("a source file reads");
        let wing = web.join(&from);
        let wing_files: BTreeSet<String> = match std::fs::read_dir(&wing) {
            Ok(entries) => entries
                .map(|e| e.expect("an entry").path().file_stem().expect("a name").to_string_lossy().into_owned())
                .filter(|name| name != "mod")
                .collect(),
            Err(_) => BTreeSet::new(),
        };
        for (path, line) in module_paths(&text, &module) {
            if path.first().is_none_or(|p| p != "web") {
                continue;
            }
            let to = web_part(&path, &parts);
            let at = format!("{}:{line}", relative.display());
            if to != from {
                let to_layer = web_layer_of(&to).expect("placed above");
                if to_layer >= from_layer {
                    wrong.push(format!("{at}: web/{from} -> web/{to} ({})", path.join("::")));
                }
                continue;
            }
            if wing_files.is_empty() {
                continue;
            }
            let (from_file, to_file) = (wing_file(&module, &wing_files), wing_file(&path, &wing_files));
            if from_file == to_file {
                continue;
            }
            if to_file == "mod" {
                wrong.push(format!(
                    "{at}: {from}/{from_file} names its wing's mod.rs, which imports it ({})",
                    path.join("::")
                ));
            }
            let edges = wings.entry(from.clone()).or_default().entry(from_file).or_default();
            edges.push((to_file, format!("{at} ({})", path.join("::"))));
        }
    }
    for (wing, edges) in &wings {
        for circle in circles(edges) {
            wrong.push(format!("a circle between the files of web/{wing}/: {circle}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} imports inside web/ run upward, sideways or in a circle (tests/layers.rs lists WEB_LAYERS):\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[test]
fn the_web_scanner_resolves_relative_paths() {
    let module: Vec<String> = ["web", "dlq", "page"].map(String::from).to_vec();
    let text = "use super::moves::{\n    start_move, target_queue_names,\n};\nuse crate::web::{error::WebError, links};\nfn f() { crate::alerts::x(); format!(\"{a}\"); }\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n";
    let paths: Vec<(String, usize)> =
        module_paths(text, &module).into_iter().map(|(p, line)| (p.join("::"), line)).collect();
    assert_eq!(
        paths,
        [
            ("web::dlq::moves::start_move".to_string(), 1),
            ("web::dlq::moves::target_queue_names".to_string(), 1),
            ("web::error::WebError".to_string(), 4),
            ("web::links".to_string(), 4),
            ("alerts::x".to_string(), 5),
            ("web::dlq::page::*".to_string(), 8),
        ]
    );
    let parts: BTreeSet<String> = ["dlq", "error"].map(String::from).into();
    assert_eq!(web_part(&["web".to_string(), "router".to_string()], &parts), "mod");
}

#[test]
fn the_scanner_reads_groups_and_ignores_other_crates() {
    let text =
        "use crate::{config::Config, dlq::{jobs, custody}};\nfn f() { crate::web::x(); $crate::a; my_crate::b; }";
    let names: Vec<String> = named_parts(text).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["config", "dlq", "web"]);
}

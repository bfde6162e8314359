//! The layers of `src/` and their one-way doors (docs/development.md, "Layout"): every
//! `crate::` path a file names must point to its own part or to a part below it. A new import
//! that runs upward, and so any import circle between parts, fails here with the file and line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// From the bottom: each part may name the parts of earlier layers only. Within a layer, parts
/// do not name each other.
const LAYERS: &[(&str, &[&str])] = &[
    ("the configuration: plain data, imports nothing of warren's", &["config"]),
    ("the JSON form of times, which every answer type shares", &["times"]),
    ("what the broker says", &["broker"]),
    ("the values derived from it", &["metrics", "memory"]),
    ("what warren keeps: the database and the history in it", &["history"]),
    ("the audit log in that database, and what warren knows now (in memory)", &["audit", "live"]),
    ("who may do what", &["auth"]),
    ("dead letters: snapshots, moves, custody", &["dlq"]),
    ("the pollers, which feed `live` and read the dead-letter wing's marks", &["poller"]),
    ("alerts over what the pollers found", &["alerts"]),
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

#[test]
fn the_scanner_reads_groups_and_ignores_other_crates() {
    let text =
        "use crate::{config::Config, dlq::{jobs, custody}};\nfn f() { crate::web::x(); $crate::a; my_crate::b; }";
    let names: Vec<String> = named_parts(text).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["config", "dlq", "web"]);
}

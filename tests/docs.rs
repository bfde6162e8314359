//! The documentation of `docs/`: every page is in the table of contents (`SUMMARY.md`) and served
//! at `/docs/...` in the site's layout; every relative link between the pages and to their
//! images resolves, anchors included; the configuration reference names every key the
//! configuration file accepts (read from the structs of `src/`, so it cannot drift); and all of
//! it works under the base path of `public_url`, as behind a reverse proxy.

#[path = "docs/commands.rs"]
mod commands;
mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use common::{broker, TestVhost, Warren};
use pulldown_cmark::{Event, Parser, Tag};

fn docs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docs")
}

/// The names of `docs/` with this extension, without it.
fn files(extension: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(docs_dir())
        .expect("docs/ is there")
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|name| name.strip_suffix(&format!(".{extension}")).map(str::to_string))
        .collect();
    names.sort();
    names
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every link and image target of a Markdown text, as written.
fn links(markdown: &str) -> Vec<String> {
    Parser::new_ext(markdown, pulldown_cmark::Options::ENABLE_TABLES)
        .filter_map(|event| match event {
            Event::Start(Tag::Link { dest_url, .. }) | Event::Start(Tag::Image { dest_url, .. }) => {
                Some(dest_url.to_string())
            }
            _ => None,
        })
        .collect()
}

fn is_external(link: &str) -> bool {
    link.starts_with("http://") || link.starts_with("https://") || link.starts_with("mailto:")
}

/// warren on its own vhost, with `public_url` when given (its path is the base path).
async fn warren(test: &str, public_url: Option<&str>) -> (TestVhost, Warren) {
    let vhost = TestVhost::create(test).await;
    let public = public_url.map(|u| format!("public_url = {u:?}\n")).unwrap_or_default();
    let warren = Warren::start(&format!(
        "{public}[[brokers]]\nname = \"local\"\n{}vhosts_include = [{:?}]\n",
        broker().toml(),
        vhost.name
    ))
    .await;
    (vhost, warren)
}

#[tokio::test]
async fn every_page_is_in_the_summary_and_served() {
    let summary = read(&docs_dir().join("SUMMARY.md"));
    let listed: BTreeSet<String> = links(&summary).into_iter().collect();
    let (_vhost, warren) = warren("docs-served", None).await;

    let (status, contents) = warren.get_text("/docs").await;
    assert_eq!(status, 200, "/docs: {contents}");
    assert!(contents.contains("<h1"), "the table of contents is rendered: {contents}");

    let pages = files("md");
    assert!(pages.len() >= 15, "docs/ has the book's pages: {pages:?}");
    for page in pages.iter().filter(|p| *p != "SUMMARY") {
        assert!(listed.contains(&format!("{page}.md")), "docs/{page}.md is not in docs/SUMMARY.md");
        let (status, html) = warren.get_text(&format!("/docs/{page}")).await;
        assert_eq!(status, 200, "/docs/{page}");
        assert!(html.contains("<article class=\"docs\">") && html.contains("<h1"), "/docs/{page} is rendered: {html}");
        assert!(html.contains("aria-current=\"page\">Docs</a>"), "/docs/{page} marks Docs in the navigation");
        // The file's own name leads to the page too.
        let response = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap()
            .get(warren.url(&format!("/docs/{page}.md")))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 303, "/docs/{page}.md redirects");
        assert_eq!(response.headers()["location"], format!("/docs/{page}").as_str());
    }
    for listed in &listed {
        let name = listed.strip_suffix(".md").unwrap_or_else(|| panic!("SUMMARY.md links {listed}, not a page"));
        assert!(pages.contains(&name.to_string()), "SUMMARY.md links {listed}, which is not in docs/");
    }
    for image in files("png") {
        let response = reqwest::get(warren.url(&format!("/docs/{image}.png"))).await.unwrap();
        assert_eq!(response.status(), 200, "/docs/{image}.png");
        assert_eq!(response.headers()["content-type"], "image/png");
        let bytes = response.bytes().await.unwrap();
        assert_eq!(bytes.as_ref(), std::fs::read(docs_dir().join(format!("{image}.png"))).unwrap(), "{image}.png");
    }
    let (status, _) = warren.get_text("/docs/no-such-page").await;
    assert_eq!(status, 404);

    // The header of every page links the documentation.
    let (_, overview) = warren.get_text("/").await;
    assert!(overview.contains("href=\"/docs\">Docs</a>"), "the navigation links /docs: {overview}");
    // Issue 34, case 7: "API" opened raw JSON; it opens the API's documentation.
    assert!(overview.contains("href=\"/docs/api\">API</a>"), "the navigation's API link: {overview}");
    warren.stop().await;
}

#[tokio::test]
async fn every_relative_link_resolves_anchors_included() {
    let (_vhost, warren) = warren("docs-links", None).await;
    let mut checked = 0;
    let mut problems = Vec::new();
    // Links as the files write them (GitHub follows these), README's into docs/ too.
    let mut sources: Vec<(PathBuf, String)> =
        files("md").into_iter().map(|p| (docs_dir(), format!("{p}.md"))).collect();
    sources.push((PathBuf::from(env!("CARGO_MANIFEST_DIR")), "README.md".into()));
    for (dir, file) in &sources {
        for link in links(&read(&dir.join(file))) {
            if is_external(&link) {
                continue;
            }
            checked += 1;
            let (path, fragment) = link.split_once('#').map_or((link.as_str(), None), |(p, f)| (p, Some(f)));
            let target = if path.is_empty() { dir.join(file) } else { dir.join(path) };
            if !target.is_file() {
                problems.push(format!("{file}: {link}: no file {}", target.display()));
                continue;
            }
            let Some(fragment) = fragment else { continue };
            // An anchor must be a heading of the page it names, as warren serves it.
            let in_docs = target.parent() == Some(docs_dir().as_path());
            let name = target.file_stem().unwrap().to_string_lossy().into_owned();
            if !in_docs || target.extension().is_none_or(|e| e != "md") {
                problems.push(format!("{file}: {link}: an anchor outside docs/"));
                continue;
            }
            let served = if name == "SUMMARY" { "/docs".to_string() } else { format!("/docs/{name}") };
            let (_, html) = warren.get_text(&served).await;
            if !html.contains(&format!("id=\"{fragment}\"")) {
                problems.push(format!("{file}: {link}: {served} has no heading #{fragment}"));
            }
        }
    }
    assert!(checked >= 40, "only {checked} relative links were found");

    // And as served: every link and image of every page that stays inside /docs answers.
    let attribute = regex::Regex::new(r##"\s(href|src)="(/docs[^"#]*)"##).unwrap();
    for page in files("md") {
        let served = if page == "SUMMARY" { "/docs".to_string() } else { format!("/docs/{page}") };
        let (_, html) = warren.get_text(&served).await;
        for url in attribute.captures_iter(&html).map(|c| c[2].to_string()).collect::<BTreeSet<_>>() {
            let status = reqwest::get(warren.url(&url)).await.unwrap().status();
            if status != 200 {
                problems.push(format!("{served} links {url}: {status}"));
            }
        }
    }
    assert!(problems.is_empty(), "{} broken links:\n{}", problems.len(), problems.join("\n"));
    warren.stop().await;
}

/// The field names of `struct name` (or the fields of the variants of `enum name`) in `file`:
/// `field: Type` lines up to the item's closing brace at the start of a line. A field marked
/// `#[serde(flatten)]` brings its type's keys, not its own name, and is left out.
fn fields(file: &str, item: &str) -> Vec<String> {
    let text = read(&Path::new(env!("CARGO_MANIFEST_DIR")).join(file));
    let start = [format!("struct {item} {{"), format!("enum {item} {{")]
        .iter()
        .find_map(|head| text.find(head.as_str()))
        .unwrap_or_else(|| panic!("{item} is not in {file}"));
    let body = &text[start..];
    let body = &body[..body.find("\n}").expect("the item closes")];
    let field = regex::Regex::new(r"^\s*(?:pub )?([a-z_][a-z0-9_]*):").unwrap();
    let mut out = Vec::new();
    let mut flattened = false;
    for line in body.lines().skip(1) {
        if line.contains("serde(flatten)") {
            flattened = true;
            continue;
        }
        if let Some(c) = field.captures(line) {
            if !flattened {
                out.push(c[1].to_string());
            }
            flattened = false;
        }
    }
    assert!(!out.is_empty(), "no fields read from {item} in {file}");
    out
}

#[test]
fn the_configuration_reference_names_every_key() {
    let reference = read(&docs_dir().join("configuration.md"));
    let items = [
        ("src/config.rs", "FileConfig"),
        ("src/config.rs", "FileAuth"),
        ("src/config.rs", "ProxyConfig"),
        ("src/config.rs", "FileBroker"),
        ("src/config.rs", "CustodyRule"),
        ("src/config/tls.rs", "TlsFile"),
        ("src/config/tls.rs", "TlsFileEndpoint"),
        ("src/alerts/rule.rs", "Rule"),
        ("src/alerts/rule.rs", "Scope"),
        ("src/alerts/notify/channel.rs", "NotificationChannel"),
        ("src/alerts/notify/channel.rs", "ChannelKind"),
        ("src/alerts/notify/channel.rs", "EmailSettings"),
        ("src/alerts/notify/alertmanager.rs", "AlertmanagerSettings"),
    ];
    let mut missing = Vec::new();
    let mut keys = 0;
    for (file, item) in items {
        for key in fields(file, item) {
            keys += 1;
            // As a key of the reference's TOML (`key = ...`, `{ key = ...`), a table of it
            // (`[auth.proxy]`, `[[brokers]]`), or named in code.
            let named = regex::Regex::new(&format!(
                r"(?m)(^\s*#?\s*|[{{,]\s*)\b{key}\s*=|`{key}`|^#?\s*\[\[?([a-z_]+\.)*{key}\]"
            ))
            .unwrap();
            if !named.is_match(&reference) {
                missing.push(format!("{key} ({item} in {file})"));
            }
        }
    }
    // A notification channel's `type` is serde's tag, not a field.
    if !reference.contains("type = \"webhook\"") {
        missing.push("type (the channel's tag)".into());
    }
    assert!(keys >= 60, "only {keys} keys were read from src/");
    assert!(missing.is_empty(), "docs/configuration.md does not name: {missing:?}");
}

#[tokio::test]
async fn the_docs_work_under_a_base_path() {
    let (_vhost, warren) = warren("docs-base", Some("http://127.0.0.1:1/warren/")).await;
    let (status, contents) = warren.get_text("/warren/docs").await;
    assert_eq!(status, 200, "{contents}");
    assert!(contents.contains("href=\"/warren/docs/getting-started\""), "links carry the base path: {contents}");
    assert!(!contents.contains("href=\"/docs"), "no link leaves the base path: {contents}");
    let (status, page) = warren.get_text("/warren/docs/getting-started").await;
    assert_eq!(status, 200);
    assert!(page.contains("src=\"/warren/docs/overview.png\""), "images carry the base path: {page}");
    assert!(page.contains("href=\"/warren/docs/production\""), "{page}");
    assert!(page.contains("href=\"/warren/docs\">Documentation contents</a>"), "{page}");
    assert!(page.contains("href=\"/warren/static/warren.css\""), "the site's layout: {page}");
    assert!(page.contains("href=\"/warren/docs\" aria-current=\"page\">Docs</a>"), "{page}");
    let image = reqwest::get(warren.url("/warren/docs/overview.png")).await.unwrap();
    assert_eq!(image.status(), 200);
    // A proxy that strips the prefix forwards `/docs/...`: served as well.
    assert_eq!(warren.get_text("/docs/tls").await.0, 200);
    warren.stop().await;
}

/// Paths the docs name that are not in the repository by design, with why.
const NOT_IN_THE_REPOSITORY: &[(&str, &str)] =
    &[("fuzz/corpus-run/", "where a fuzzing run writes its new inputs; not committed (.gitignore)")];

/// Issue 34, must-have 1: the README cited `PERF.md` and `DOMAIN.md`, which are not in the
/// repository. Every path the README and the docs name in the repository's folders
/// (`src/...`, `tests/...`, `.ci/...`) and every `NAME.md` exists, unless
/// `NOT_IN_THE_REPOSITORY` says why not; a placeholder (`<target>`) or a glob is no path.
#[test]
fn nothing_in_the_docs_cites_a_file_not_in_the_repository() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let in_folder = regex::Regex::new(
        r#"(?:^|[^\w./~-])((?:src|tests|docs|migrations|templates|static|deploy|scripts|benches|fuzz|vendor|\.ci)/[^\s`)\]'",;:]*)"#,
    )
    .unwrap();
    let markdown_name = regex::Regex::new(r"(?:^|[^\w./-])([\w-]+\.md)\b").unwrap();
    let mut pages: Vec<PathBuf> = files("md").iter().map(|name| docs_dir().join(format!("{name}.md"))).collect();
    pages.push(root.join("README.md"));
    let mut missing = Vec::new();
    for page in pages {
        let text = read(&page);
        let cited = in_folder.captures_iter(&text).chain(markdown_name.captures_iter(&text)).map(|c| c[1].to_string());
        for path in cited {
            let path = path.trim_end_matches('.').split('#').next().unwrap_or_default().to_string();
            if path.contains('<') || path.contains('*') || NOT_IN_THE_REPOSITORY.iter().any(|(p, _)| *p == path) {
                continue;
            }
            if !root.join(&path).exists() && !docs_dir().join(&path).exists() {
                missing.push(format!("{}: {path}", page.file_name().unwrap().to_string_lossy()));
            }
        }
    }
    assert!(missing.is_empty(), "cited, not in the repository: {missing:#?}");
}

/// Issue 34, must-have 1: the OpenAPI description rendered in the docs. `/docs/api-reference`
/// lists every operation of the description the API serves, in the site's layout, and the API
/// page links it.
#[tokio::test]
async fn the_api_reference_lists_every_operation_the_api_serves() {
    let (_vhost, warren) = warren("docs-api-reference", None).await;
    let (status, description) = warren.get_json("/api/v1/openapi.json").await;
    assert_eq!(status, 200);
    let (status, page) = warren.get_text("/docs/api-reference").await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("<article class=\"docs\">"), "{page}");
    let mut operations = 0;
    for (path, item) in description["paths"].as_object().unwrap() {
        for method in ["get", "post", "put", "patch", "delete"].iter().filter(|m| item.get(**m).is_some()) {
            // As rendered: the heading's text, HTML-escaped.
            let heading = format!("{} {}</h3>", method.to_uppercase(), path.replace('&', "&amp;"));
            assert!(page.contains(&heading), "{heading} on the reference page");
            operations += 1;
        }
    }
    assert!(operations > 50, "{operations} operations");
    for schema in description["components"]["schemas"].as_object().unwrap().keys() {
        assert!(page.contains(&format!("{schema}</h3>")), "schema {schema} on the reference page");
    }
    let (_, api) = warren.get_text("/docs/api").await;
    assert!(api.contains("href=\"/docs/api-reference\""), "the API page links the reference: {api}");
    warren.stop().await;
}

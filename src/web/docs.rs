//! The documentation of `docs/`, served at `/docs` (the table of contents, `SUMMARY.md`) and
//! `/docs/{page}`: Markdown embedded at compile time, rendered in the site's layout. Links
//! between pages (`tls.md#files`) and to images (`overview.png`) are written as the files link
//! them, so they work on GitHub too; here they become URLs under the base path of `public_url`.
//! Raw HTML in the Markdown is shown as text, never passed through.

use askama::Template;
use axum::extract::Path;
use axum::http::header;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;
use pulldown_cmark::{CodeBlockKind, CowStr, Event, Options, Parser, Tag, TagEnd};

use crate::state::AppState;
use crate::web::api_reference;
use crate::web::error::WebError;
use crate::web::error_page::PageError;
use crate::web::htmx::html;
use crate::web::identity::Me;

pub fn router() -> Router<AppState> {
    Router::new().route("/docs", get(contents)).route("/docs/{page}", get(page))
}

/// Every Markdown file of `docs/`, by its name without `.md` (tests/docs.rs checks that none is
/// missing and that each is in `SUMMARY.md`).
const PAGES: &[(&str, &str)] = &[
    ("SUMMARY", include_str!("../../docs/SUMMARY.md")),
    ("advisor", include_str!("../../docs/advisor.md")),
    ("alerts", include_str!("../../docs/alerts.md")),
    ("api", include_str!("../../docs/api.md")),
    ("api-reference", include_str!("../../docs/api-reference.md")),
    ("benchmarks", include_str!("../../docs/benchmarks.md")),
    ("concepts", include_str!("../../docs/concepts.md")),
    ("configuration", include_str!("../../docs/configuration.md")),
    ("dead-letters", include_str!("../../docs/dead-letters.md")),
    ("deploy", include_str!("../../docs/deploy.md")),
    ("design", include_str!("../../docs/design.md")),
    ("development", include_str!("../../docs/development.md")),
    ("getting-started", include_str!("../../docs/getting-started.md")),
    ("operations", include_str!("../../docs/operations.md")),
    ("pages", include_str!("../../docs/pages.md")),
    ("production", include_str!("../../docs/production.md")),
    ("replicas", include_str!("../../docs/replicas.md")),
    ("reverse-proxy", include_str!("../../docs/reverse-proxy.md")),
    ("tls", include_str!("../../docs/tls.md")),
    ("users", include_str!("../../docs/users.md")),
];

const IMAGES: &[(&str, &[u8])] = &[
    ("alerts.png", include_bytes!("../../docs/alerts.png")),
    ("audit.png", include_bytes!("../../docs/audit.png")),
    ("broker.png", include_bytes!("../../docs/broker.png")),
    ("clients.png", include_bytes!("../../docs/clients.png")),
    ("compare.png", include_bytes!("../../docs/compare.png")),
    ("dlq-list.png", include_bytes!("../../docs/dlq-list.png")),
    ("dlq.png", include_bytes!("../../docs/dlq.png")),
    ("exchanges.png", include_bytes!("../../docs/exchanges.png")),
    ("job.png", include_bytes!("../../docs/job.png")),
    ("message.png", include_bytes!("../../docs/message.png")),
    ("nodes.png", include_bytes!("../../docs/nodes.png")),
    ("overview.png", include_bytes!("../../docs/overview.png")),
    ("queue.png", include_bytes!("../../docs/queue.png")),
    ("queues-phone.png", include_bytes!("../../docs/queues-phone.png")),
    ("queues.png", include_bytes!("../../docs/queues.png")),
    ("users.png", include_bytes!("../../docs/users.png")),
];

#[derive(Template)]
#[template(path = "docs.html")]
struct DocPage {
    me: Me,
    title: String,
    /// Rendered from the embedded Markdown, raw HTML shown as text (`render`).
    body: String,
    contents_href: String,
    /// The pages before and after this one in `SUMMARY.md`: href and title.
    prev: Option<(String, String)>,
    next: Option<(String, String)>,
}

async fn contents(me: Me) -> Result<Response, PageError> {
    show(me, "SUMMARY")
}

async fn page(me: Me, Path(page): Path<String>) -> Result<Response, PageError> {
    if let Some((_, bytes)) = IMAGES.iter().find(|(name, _)| *name == page) {
        let headers = [(header::CONTENT_TYPE, "image/png"), (header::CACHE_CONTROL, "public, max-age=300")];
        return Ok((headers, *bytes).into_response());
    }
    // Someone who types the file's name (`/docs/tls.md`) gets the page.
    if let Some(name) = page.strip_suffix(".md") {
        return Ok(Redirect::to(&page_href(&me.base, name)).into_response());
    }
    if page == "SUMMARY" {
        return Ok(Redirect::to(&page_href(&me.base, "SUMMARY")).into_response());
    }
    show(me, &page)
}

fn show(mut me: Me, name: &str) -> Result<Response, PageError> {
    let Some((_, markdown)) = PAGES.iter().find(|(page, _)| *page == name) else {
        return Err(WebError::NotFound(format!("there is no documentation page {name:?}")).into());
    };
    // The API reference is the page's introduction and the OpenAPI description the API serves.
    let generated;
    let markdown = if name == api_reference::PAGE {
        generated = format!("{markdown}{}", api_reference::markdown(&crate::web::openapi::document()));
        generated.as_str()
    } else {
        markdown
    };
    let rendered = render(markdown, &me.base);
    let order = summary_order();
    let at = order.iter().position(|page| page == name);
    let neighbour = |i: Option<usize>| {
        let page = order.get(i?)?;
        let (_, markdown) = PAGES.iter().find(|(p, _)| p == page)?;
        Some((page_href(&me.base, page), render(markdown, &me.base).title))
    };
    let (prev, next) = match at {
        Some(i) => (neighbour(i.checked_sub(1)), neighbour(Some(i + 1))),
        None => (None, None),
    };
    me.section = "docs";
    let page = DocPage {
        contents_href: page_href(&me.base, "SUMMARY"),
        title: rendered.title,
        body: rendered.html,
        prev,
        next,
        me,
    };
    Ok(html(page.render()?))
}

/// Where the page `name` (a file name without `.md`) is served, under `base`.
fn page_href(base: &str, name: &str) -> String {
    if name == "SUMMARY" {
        format!("{base}/docs")
    } else {
        format!("{base}/docs/{name}")
    }
}

/// The pages in the order `SUMMARY.md` links them.
fn summary_order() -> Vec<String> {
    let summary = PAGES.iter().find(|(name, _)| *name == "SUMMARY").map_or("", |(_, text)| *text);
    Parser::new(summary)
        .filter_map(|event| match event {
            Event::Start(Tag::Link { dest_url, .. }) => dest_url.strip_suffix(".md").map(str::to_string),
            _ => None,
        })
        .collect()
}

struct Rendered {
    /// The text of the first heading of level 1.
    title: String,
    html: String,
}

/// Markdown to HTML: raw HTML becomes text, headings get GitHub's anchor ids (so that
/// `page.md#a-heading` links land), and relative links point under `base`.
fn render(markdown: &str, base: &str) -> Rendered {
    let options = Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH;
    let mut events: Vec<Event> = Parser::new_ext(markdown, options)
        .map(|event| match event {
            Event::Html(raw) | Event::InlineHtml(raw) => Event::Text(raw),
            Event::Start(Tag::HtmlBlock) => Event::Start(Tag::CodeBlock(CodeBlockKind::Indented)),
            Event::End(TagEnd::HtmlBlock) => Event::End(TagEnd::CodeBlock),
            Event::Start(Tag::Link { link_type, dest_url, title, id }) => {
                Event::Start(Tag::Link { link_type, dest_url: local_href(dest_url, base), title, id })
            }
            Event::Start(Tag::Image { link_type, dest_url, title, id }) => {
                Event::Start(Tag::Image { link_type, dest_url: local_href(dest_url, base), title, id })
            }
            other => other,
        })
        .collect();

    let mut title = String::new();
    let mut used: Vec<String> = Vec::new();
    let mut i = 0;
    while i < events.len() {
        if let Event::Start(Tag::Heading { level, .. }) = &events[i] {
            let level = *level;
            let text: String = events[i + 1..]
                .iter()
                .take_while(|e| !matches!(e, Event::End(TagEnd::Heading(_))))
                .filter_map(|e| match e {
                    Event::Text(t) | Event::Code(t) => Some(t.as_ref()),
                    _ => None,
                })
                .collect();
            if level == pulldown_cmark::HeadingLevel::H1 && title.is_empty() {
                title = text.clone();
            }
            let slug = unique_slug(&text, &mut used);
            if let Event::Start(Tag::Heading { id, .. }) = &mut events[i] {
                *id = Some(CowStr::from(slug));
            }
        }
        i += 1;
    }
    let mut html = String::new();
    pulldown_cmark::html::push_html(&mut html, events.into_iter());
    Rendered { title, html }
}

/// A link as the browser should follow it: another page of `docs/` (`tls.md#files`) or one of
/// its images under `base`/docs; anything with a scheme, an absolute path or only a fragment as
/// it is.
fn local_href<'a>(dest: CowStr<'a>, base: &str) -> CowStr<'a> {
    let (path, fragment) = match dest.split_once('#') {
        Some((path, fragment)) => (path, Some(fragment)),
        None => (dest.as_ref(), None),
    };
    let has_scheme = path.split_once(':').is_some_and(|(scheme, _)| !scheme.contains('/'));
    if path.is_empty() || has_scheme || path.starts_with('/') || path.contains('/') {
        return dest;
    }
    let href = match path.strip_suffix(".md") {
        Some(name) => page_href(base, name),
        None => format!("{base}/docs/{path}"),
    };
    CowStr::from(match fragment {
        Some(fragment) => format!("{href}#{fragment}"),
        None => href,
    })
}

/// GitHub's anchor for a heading: lower case, spaces as `-`, letters, digits, `-` and `_` kept,
/// the rest dropped; a repeated anchor gets `-1`, `-2`, ...
fn unique_slug(text: &str, used: &mut Vec<String>) -> String {
    let slug: String = text
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect();
    let mut candidate = slug.clone();
    let mut n = 0;
    while used.contains(&candidate) {
        n += 1;
        candidate = format!("{slug}-{n}");
    }
    used.push(candidate.clone());
    candidate
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_html_is_shown_as_text() {
        let out = render("# T\n\n<script>alert(1)</script>\n\nand <b>bold</b> inline\n", "");
        assert!(!out.html.contains("<script>"), "{}", out.html);
        assert!(out.html.contains("&lt;script&gt;"), "{}", out.html);
        assert!(out.html.contains("&lt;b&gt;bold&lt;/b&gt;"), "{}", out.html);
    }

    #[test]
    fn links_point_under_the_base_path() {
        let out = render(
            "# T\n\n[a](tls.md#files) [b](SUMMARY.md) ![c](overview.png) [d](https://x.example/a.md) [e](#here)\n",
            "/warren",
        );
        for href in [
            "href=\"/warren/docs/tls#files\"",
            "href=\"/warren/docs\"",
            "src=\"/warren/docs/overview.png\"",
            "href=\"https://x.example/a.md\"",
            "href=\"#here\"",
        ] {
            assert!(out.html.contains(href), "{href} in {}", out.html);
        }
    }

    #[test]
    fn headings_get_githubs_anchors() {
        let out =
            render("# The `warren` pages\n\n## Custody: intake, at 100,000\n\n## Custody: intake, at 100,000\n", "");
        assert_eq!(out.title, "The warren pages");
        assert!(out.html.contains("id=\"the-warren-pages\""), "{}", out.html);
        assert!(out.html.contains("id=\"custody-intake-at-100000\""), "{}", out.html);
        assert!(out.html.contains("id=\"custody-intake-at-100000-1\""), "{}", out.html);
    }
}

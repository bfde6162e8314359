//! Every command the documentation shows, run as written (issue 34, must-have 1): each command
//! line of each `sh` block of `docs/*.md` that calls warren runs against the binary cargo built,
//! in a temporary directory (so its `warren.db` is a new one); the commands that cannot run in a
//! test are listed in `NOT_RUN`, each with its reason. A command in neither fails the test, so
//! a new one is not skipped without a word, and an entry of `NOT_RUN` the docs no longer show
//! fails it too.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};

use super::{docs_dir, files, read};

/// Command lines of the docs that a test does not run, exactly as the docs show them (without
/// their comments), with why.
const NOT_RUN: &[(&str, &str)] = &[
    ("apt-get install rabbitmq-server", "installs system packages, as root"),
    (
        "apt-get install rabbitmq-server chromium chromium-driver prometheus-alertmanager prometheus nginx",
        "installs system packages, as root",
    ),
    ("rabbitmq-plugins enable rabbitmq_management rabbitmq_prometheus", "changes the shared broker's plugins"),
    (
        "rabbitmq-plugins enable rabbitmq_management rabbitmq_shovel rabbitmq_shovel_management rabbitmq_prometheus",
        "changes the shared broker's plugins",
    ),
    ("rabbitmqctl add_user warren 'a-long-password'", "changes the shared broker's users, as root"),
    ("rabbitmqctl set_user_tags warren monitoring", "changes the shared broker's users, as root"),
    ("rabbitmqctl set_permissions -p / warren '^$' '^$' '.*'", "changes the shared broker's permissions, as root"),
    (
        "rabbitmqctl set_permissions -p / warren '^warren\\.held\\.' '^amq\\.default$' '.*'",
        "changes the shared broker's permissions, as root",
    ),
    ("git clone <this repository> warren && cd warren", "the reader's clone: the test runs in one"),
    ("cargo build --release", "builds warren: the test runs the binary cargo built for it"),
    ("docker build -t warren .", "no container runtime runs containers here (podman: cgroups; DOMAIN.md §10)"),
    (
        "docker run --rm -i -v warren-data:/data warren user add admin --role admin <<< 'a long password'",
        "no container runtime runs containers here; `warren user add` itself runs from users.md",
    ),
    (
        "docker run -d -p 8080:8080 -v warren-data:/data -e WARREN_CONFIG=/etc/warren/warren.toml -v \"$PWD/warren.toml:/etc/warren/warren.toml:ro\" warren",
        "no container runtime runs containers here",
    ),
    ("docker compose -f deploy/compose.yaml up --build -d", "no container runtime runs containers here"),
    (
        "docker compose -f deploy/compose.yaml run --rm -T warren user add admin --role admin <<< 'a long password'",
        "no container runtime runs containers here",
    ),
    (".ci/test", "the whole suite, of which this test is one"),
    ("cargo test --test dlq", "a test file of the suite this test is part of"),
    ("npm install --prefix ~/.cache/warren-axe axe-core@4.14.1", "a download from npm, done by .ci/run"),
    ("pip3 install 'schemathesis>=4.32,<5'", "a download from PyPI, done by .ci/run"),
    ("cargo install cargo-fuzz --locked", "a download from crates.io, done by .ci/fuzz"),
    ("WARREN_FUZZ_SECS=300 .ci/fuzz", "minutes of fuzzing, which CI runs after the tests"),
    (
        "cd fuzz && mkdir -p corpus-run/web_form && RUSTC_BOOTSTRAP=1 cargo fuzz run -s none --codegen-units 16 web_form corpus-run/web_form corpus/web_form -- -dict=dicts/web_form.dict",
        "fuzzing by hand, which runs until stopped",
    ),
    // An environment for a container, not commands: its files under /run/secrets exist only in
    // a deployment. Each name is one `check-config` knows (`every_variable_the_docs_set_is_known`).
    ("WARREN_LISTEN=0.0.0.0:8080", "an environment for a container"),
    ("WARREN_BROKER_LOCAL_MANAGEMENT_URL=https://rabbit.internal:15671", "an environment for a container"),
    ("WARREN_BROKER_LOCAL_USER=warren", "an environment for a container"),
    ("WARREN_BROKER_LOCAL_PASSWORD_FILE=/run/secrets/rabbit", "an environment for a container"),
    ("WARREN_NOTIFICATIONS=ops", "an environment for a container"),
    ("WARREN_NOTIFICATION_OPS_TYPE=slack", "an environment for a container"),
    ("WARREN_NOTIFICATION_OPS_URL_FILE=/run/secrets/slack-webhook", "an environment for a container"),
];

/// The command lines of a page's `sh` blocks, in order: continuation lines joined, comments and
/// blank lines left out.
fn command_lines(markdown: &str) -> Vec<String> {
    let (mut lines, mut in_sh, mut block) = (Vec::new(), false, String::new());
    for event in Parser::new(markdown) {
        match event {
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(info))) => in_sh = &*info == "sh",
            Event::Text(text) if in_sh => block.push_str(&text),
            Event::End(TagEnd::CodeBlock) if in_sh => {
                let joined = block.replace("\\\n", " ");
                for line in joined.lines() {
                    let line = without_comment(line);
                    if !line.is_empty() {
                        lines.push(line.split_whitespace().collect::<Vec<_>>().join(" "));
                    }
                }
                (in_sh, block) = (false, String::new());
            }
            _ => {}
        }
    }
    lines
}

/// A shell line without its comment: from a `#` at the start or after a blank, outside quotes.
fn without_comment(line: &str) -> String {
    let (mut quote, mut previous) = (None, ' ');
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '#') if previous.is_whitespace() => return line[..i].trim().to_string(),
            _ => {}
        }
        previous = c;
    }
    line.trim().to_string()
}

/// warren's arguments if `line` runs warren (`warren ...` or `./target/release/warren ...`).
fn warren_args(line: &str) -> Option<Vec<String>> {
    let mut words = line.split_whitespace();
    match words.next()? {
        "warren" | "./target/release/warren" => Some(words.map(str::to_string).collect()),
        _ => None,
    }
}

/// What the docs' commands read from their directory: a `warren.toml` watching the test's
/// broker (the docs' own names a broker of the reader's), on a port of its own.
fn prepare(dir: &Path) {
    let toml = format!(
        "listen = \"127.0.0.1:0\"\n\n[[brokers]]\nname = \"local\"\n{}vhosts_include = [\"docs-commands\"]\n",
        crate::common::broker().toml()
    );
    std::fs::write(dir.join("warren.toml"), toml).unwrap();
}

/// The vhost the demo runs in: the docs' `warren-demo` on the shared broker is every reader's,
/// so the test's demo gets one of its own (`--vhost`, the one argument added to a command).
fn demo_vhost() -> String {
    format!("docs-demo-{}", std::process::id())
}

/// Runs one documented warren command in `dir`; returns what it printed. Commands that serve
/// (the dashboard, the demo) are started, seen working, and stopped with SIGTERM.
fn run(dir: &Path, line: &str, mut args: Vec<String>) -> String {
    if args.first().map(String::as_str) == Some("demo") {
        args.extend(["--vhost".to_string(), demo_vhost()]);
    }
    let serves = match args.first().map(String::as_str) {
        None => Some("warren is serving on http://"),
        Some("--config") => Some("warren is serving on http://"),
        Some("demo") if !args.iter().any(|a| a == "--cleanup") => Some("demo traffic running in vhost"),
        _ => None,
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_warren"))
        .args(&args)
        .current_dir(dir)
        // The dashboard's default address is every reader's 8080: the test's gets a free port.
        .env("WARREN_LISTEN", "127.0.0.1:0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("`{line}`: {e}"));
    // A password asked for: the first line of stdin (users.md says so), twice for the prompts.
    child.stdin.take().unwrap().write_all(b"a long password for the docs\na long password for the docs\n").unwrap();
    let said = collect(&mut child);
    match serves {
        Some(sign) => {
            let deadline = Instant::now() + Duration::from_secs(60);
            let mut out = String::new();
            while !out.contains(sign) {
                let left = deadline.saturating_duration_since(Instant::now());
                match said.recv_timeout(left) {
                    Ok(line) => out.push_str(&(line + "\n")),
                    Err(_) => panic!("`{line}` did not say {sign:?} within 60 s: {out}"),
                }
            }
            if let Some(addr) = out.split("serving on http://").nth(1).and_then(|rest| rest.split_whitespace().next()) {
                assert!(healthz(addr).starts_with("HTTP/1.1 200"), "`{line}` serves on {addr}: {out}");
            }
            let stopped = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
            assert!(stopped.success());
            let status = child.wait().unwrap();
            out.extend(said.iter().map(|l| l + "\n"));
            // Stopped by the signal before its handler was installed, or ended by it cleanly.
            use std::os::unix::process::ExitStatusExt;
            assert!(
                status.success() || status.signal() == Some(15),
                "`{line}` ended with {status} after SIGTERM: {out}"
            );
            out
        }
        None => {
            let status = child.wait().unwrap();
            let out: String = said.iter().map(|l| l + "\n").collect();
            assert!(status.success(), "`{line}` ({}) failed with {status}: {out}", dir.display());
            out
        }
    }
}

/// The answer of `GET /healthz` at `addr`.
fn healthz(addr: &str) -> String {
    use std::io::Read;
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok();
    answer
}

/// Every line the child prints on stdout and stderr, as it prints them.
fn collect(child: &mut Child) -> mpsc::Receiver<String> {
    let (send, receive) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let again = send.clone();
    std::thread::spawn(move || BufReader::new(stdout).lines().map_while(Result::ok).try_for_each(|l| send.send(l)));
    std::thread::spawn(move || BufReader::new(stderr).lines().map_while(Result::ok).try_for_each(|l| again.send(l)));
    receive
}

#[test]
fn every_command_the_docs_show_runs_as_written() {
    let mut listed_and_shown = std::collections::BTreeSet::new();
    let mut ran = Vec::new();
    for page in files("md") {
        let lines = command_lines(&read(&docs_dir().join(format!("{page}.md"))));
        if lines.is_empty() {
            continue;
        }
        // One directory per page: its commands build on each other (add a user, then list).
        let dir = tempfile::tempdir().unwrap();
        prepare(dir.path());
        for line in lines {
            if let Some((listed, _)) = NOT_RUN.iter().find(|(l, _)| *l == line) {
                listed_and_shown.insert(*listed);
                continue;
            }
            let Some(args) = warren_args(&line) else {
                panic!(
                    "docs/{page}.md shows `{line}`: run it here, or list it in NOT_RUN with the reason it cannot run"
                );
            };
            run(dir.path(), &line, args);
            ran.push(format!("{page}: {line}"));
        }
    }
    let stale: Vec<&&str> = NOT_RUN.iter().map(|(l, _)| l).filter(|l| !listed_and_shown.contains(**l)).collect();
    assert!(stale.is_empty(), "NOT_RUN lists commands the docs no longer show: {stale:?}");
    assert!(ran.len() >= 10, "the docs' warren commands ran: {ran:#?}");
}

/// The environment that `NOT_RUN` leaves out names only variables warren knows: an unknown
/// `WARREN_*` variable stops the start with "no such setting" (configuration.md).
#[test]
fn every_variable_the_docs_set_is_known() {
    let dir = tempfile::tempdir().unwrap();
    let mut check = Command::new(env!("CARGO_BIN_EXE_warren"));
    check.arg("check-config").current_dir(dir.path());
    for (line, _) in NOT_RUN.iter().filter(|(l, _)| l.starts_with("WARREN_") && !l.contains(' ')) {
        let (name, value) = line.split_once('=').unwrap();
        // A file the value names exists only in a deployment: one of the test's stands in.
        if name.ends_with("_FILE") {
            let path = dir.path().join(name);
            std::fs::write(&path, "https://hooks.example/x\n").unwrap();
            check.env(name, &path);
        } else {
            check.env(name, value);
        }
    }
    let out = check.output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && !said.contains("no such setting"), "{said}");
    assert!(said.contains("rabbit.internal:15671"), "the variables were read: {said}");
}

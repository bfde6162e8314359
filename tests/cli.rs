//! The command line as a user meets it (issue 19, case 16): each command's help shows the flags
//! it uses and no other, and `check-config` prints TOML that warren reads back.

use std::process::Command;

fn warren(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_warren")).args(args).output().expect("warren runs");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn each_commands_help_lists_only_the_flags_it_uses() {
    let (ok, help) = warren(&["demo", "--help"]);
    assert!(ok, "{help}");
    for used in ["--management-url", "--user", "--password-file", "--amqp-url", "--vhost", "--cleanup"] {
        assert!(help.contains(used), "demo uses {used}: {help}");
    }
    for ignored in ["--listen", "--database", "--retention-days", "--poll-interval-secs"] {
        assert!(!help.contains(ignored), "demo ignores {ignored}: {help}");
    }
    let (_, help) = warren(&["user", "add", "--help"]);
    assert!(help.contains("--database") && !help.contains("--listen"), "{help}");
    let (_, help) = warren(&["serve", "--help"]);
    assert!(help.contains("default 30"), "the retention default as the configuration has it: {help}");
    assert!(!help.contains("default 7)"), "{help}");
}

#[test]
fn check_config_prints_toml_that_warren_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("warren.toml");
    std::fs::write(&path, "retention_days = 45\n[[brokers]]\nname = \"a\"\npassword = \"s3cret\"\n").unwrap();
    let (ok, printed) = warren(&["check-config", "--config", path.to_str().unwrap(), "--listen", "127.0.0.1:9999"]);
    assert!(ok, "{printed}");
    assert!(!printed.contains("s3cret") && !printed.contains("Url {") && !printed.contains("secs:"), "{printed}");
    assert!(printed.contains("listen = \"127.0.0.1:9999\"") && printed.contains("retention_days = 45"), "{printed}");
    let again = dir.path().join("again.toml");
    std::fs::write(&again, &printed).unwrap();
    let (ok, reprinted) = warren(&["check-config", "--config", again.to_str().unwrap()]);
    assert!(ok, "{reprinted}");
    // The values are the same; their sources are not (a flag before, the file now).
    let values = |text: &str| -> Vec<String> {
        text.lines().filter(|l| !l.starts_with('#')).map(|l| l.split("  # ").next().unwrap().to_string()).collect()
    };
    assert_eq!(values(&reprinted), values(&printed), "it reads back to the same configuration");
    assert!(printed.contains("listen = \"127.0.0.1:9999\"  # flag --listen"), "{printed}");
    assert!(reprinted.contains("listen = \"127.0.0.1:9999\"  # file"), "{reprinted}");
}

/// Issue 36, case 6: a database a newer warren wrote is refused with the version it has, not a
/// raw migrator message; the database file is created readable by its owner only.
#[test]
fn a_database_from_a_newer_warren_is_refused_with_its_version() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let database = dir.path().join("warren.db");
    let (ok, said) = warren(&["user", "list", "--database", database.to_str().unwrap()]);
    assert!(ok, "{said}");
    assert_eq!(std::fs::metadata(&database).unwrap().permissions().mode() & 0o777, 0o600);
    let added = Command::new("python3")
        .args([
            "-c",
            "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute(\"insert into _sqlx_migrations \
             (version, description, success, checksum, execution_time) values (99999, 'from the future', 1, x'00', 0)\"); c.commit()",
            database.to_str().unwrap(),
        ])
        .status()
        .expect("python3 runs");
    assert!(added.success());
    let (ok, said) = warren(&["user", "list", "--database", database.to_str().unwrap()]);
    assert!(!ok, "{said}");
    assert!(said.contains("written by a newer warren") && said.contains("99999"), "{said}");
    assert!(!said.contains("previously applied"), "not the migrator's words: {said}");
}

/// Issue 36, case 5: a client that sends half a request header and keeps the connection does
/// not hold up SIGTERM: the listener closes at once and warren exits within its bounds (the
/// drain of open requests is 5 s), while the client still holds its connection.
#[test]
fn sigterm_ends_warren_in_bounded_time_whatever_a_client_holds() {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let free = || TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (port, nobody) = (free(), free());
    let config = dir.path().join("warren.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:{port}\"\ndatabase = {:?}\n[[brokers]]\nname = \"gone\"\n\
             management_url = \"http://127.0.0.1:{nobody}\"\nprometheus_url = \"off\"\n",
            dir.path().join("warren.db").display().to_string()
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_warren"))
        .args(["--config", config.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("warren runs");
    let started = Instant::now();
    let serving = loop {
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
            let mut answer = String::new();
            let _ = s.read_to_string(&mut answer);
            if answer.starts_with("HTTP/1.1 200") {
                break true;
            }
        }
        if started.elapsed() > Duration::from_secs(30) {
            break false;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(serving, "warren did not answer /healthz");
    // Half a request header, and the connection kept.
    let mut held = TcpStream::connect(("127.0.0.1", port)).unwrap();
    held.write_all(b"GET /queues HTTP/1.1\r\nHost: x\r\nX-Slow: ").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let signalled = Instant::now();
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    let exited = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if signalled.elapsed() > Duration::from_secs(30) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let took = signalled.elapsed();
    if exited.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    eprintln!("exited {took:?} after SIGTERM with a half-sent request open");
    assert!(exited.is_some_and(|s| s.success()), "warren still ran {took:?} after SIGTERM: {exited:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    drop(held);
}

/// One HTTP/1.1 request on a new connection; the whole answer.
fn http(port: u16, request: &str) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return String::new() };
    s.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer
}

/// Issue 36, case 4: `--log-format json` writes one JSON object per line, no colour codes into
/// a pipe, an INFO line per login and failed login (the failed one with its source only), the
/// logged-in one with its audit id; no password reaches a log line.
#[test]
fn json_logs_carry_logins_with_their_audit_ids_and_no_secret() {
    use std::io::{BufRead, Write};
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let database = dir.path().join("warren.db");
    let mut add = Command::new(env!("CARGO_BIN_EXE_warren"))
        .args(["user", "add", "ada", "--role", "admin", "--database", database.to_str().unwrap()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    add.stdin.take().unwrap().write_all(b"pw-s3cret-1234567\n").unwrap();
    assert!(add.wait().unwrap().success());
    let free = || std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (port, nobody) = (free(), free());
    let config = dir.path().join("warren.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:{port}\"\ndatabase = {:?}\n[[brokers]]\nname = \"gone\"\n\
             management_url = \"http://127.0.0.1:{nobody}\"\nprometheus_url = \"off\"\n",
            database.display().to_string()
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_warren"))
        .args(["--config", config.to_str().unwrap(), "--log-format", "json"])
        .env_remove("NO_COLOR")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("warren runs");
    let started = Instant::now();
    while !http(port, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").starts_with("HTTP/1.1 200") {
        assert!(started.elapsed() < Duration::from_secs(30), "warren did not answer");
        std::thread::sleep(Duration::from_millis(100));
    }
    let login = |password: &str| {
        let body = format!("name=ada&password={password}");
        http(
            port,
            &format!(
                "POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
                 Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            ),
        )
    };
    let refused = login("wrong-s3cret-7654321");
    let accepted = login("pw-s3cret-1234567");
    assert!(accepted.contains("set-cookie") || accepted.contains("Set-Cookie"), "{accepted}\n{refused}");
    std::thread::sleep(Duration::from_millis(300));
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    let out = child.stdout.take().unwrap();
    let lines: Vec<String> = std::io::BufReader::new(out).lines().map(Result::unwrap).collect();
    let _ = child.wait();
    let all = lines.join("\n");
    assert!(!all.contains('\u{1b}'), "no colour codes into a pipe: {all}");
    assert!(!all.contains("s3cret"), "a password reached the log: {all}");
    let objects: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not one JSON object per line ({e}): {l}")))
        .collect();
    let logged_in = objects.iter().find(|o| o["message"] == "login").unwrap_or_else(|| panic!("{all}"));
    assert!(logged_in["audit_id"].as_i64().is_some() && logged_in["actor"] == "ada", "{logged_in}");
    assert_eq!(logged_in["level"], "INFO");
    let failed = objects.iter().find(|o| o["message"] == "login failed").unwrap_or_else(|| panic!("{all}"));
    assert!(failed["source"].is_string() && failed.get("actor").is_none(), "{failed}");
}

/// Issue 36, case 3: a misspelt `WARREN_*` variable stops warren with the nearest valid name
/// (it was ignored without a word), before anything starts.
#[test]
fn an_unknown_warren_variable_stops_the_start_with_the_nearest_name() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_warren"))
        .args(["check-config"])
        .current_dir(dir.path())
        .env("WARREN_BROKR_LOCAL_MANAGEMENT_URL", "http://127.0.0.1:15672")
        .output()
        .expect("warren runs");
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains("WARREN_BROKR_LOCAL_MANAGEMENT_URL")
            && said.contains("did you mean WARREN_BROKER_LOCAL_MANAGEMENT_URL?"),
        "{said}"
    );
    // The same for a broker of the file, named by its name.
    let config = dir.path().join("warren.toml");
    std::fs::write(&config, "[[brokers]]\nname = \"prod-eu\"\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_warren"))
        .args(["check-config", "--config", config.to_str().unwrap()])
        .env("WARREN_BROKER_PROD_EU_PASWORD", "x")
        .output()
        .expect("warren runs");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("did you mean WARREN_BROKER_PROD_EU_PASSWORD?"), "{said}");
}

/// Issue 36, case 3: `check-config` says where each value came from (default, the file, a
/// variable, a flag, a secret's file or variable) and prints no secret.
#[test]
fn check_config_says_where_each_value_came_from_and_prints_no_secret() {
    let dir = tempfile::tempdir().unwrap();
    let secret_file = dir.path().join("hook");
    std::fs::write(&secret_file, "https://hooks.example/T0/B0/FILESECRET\n").unwrap();
    let config = dir.path().join("warren.toml");
    std::fs::write(
        &config,
        format!(
            "retention_days = 45\n[[brokers]]\nname = \"prod\"\nuser = \"warren\"\npassword_env = \"PROD_PW\"\n\
             [[notifications]]\nid = \"ops\"\nname = \"Ops\"\ntype = \"webhook\"\nurl_file = {:?}\n\
             [[notifications]]\nid = \"mail\"\nname = \"Mail\"\ntype = \"email\"\nhost = \"smtp.example\"\n\
             user = \"warren\"\nfrom = \"w@example.com\"\nto = [\"ops@example.com\"]\n",
            secret_file.display().to_string()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_warren"))
        .args(["check-config", "--config", config.to_str().unwrap(), "--listen", "127.0.0.1:9999"])
        .env("PROD_PW", "ENVSECRET")
        .env("SMTP_PW", "SMTPSECRET")
        .env("WARREN_NOTIFICATION_MAIL_PASSWORD_ENV", "SMTP_PW")
        .env("WARREN_BROKER_PROD_POLL_INTERVAL_SECS", "7")
        .output()
        .expect("warren runs");
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{printed}{}", String::from_utf8_lossy(&out.stderr));
    for secret in ["ENVSECRET", "SMTPSECRET", "FILESECRET"] {
        assert!(!printed.contains(secret), "{printed}");
    }
    for line in [
        "listen = \"127.0.0.1:9999\"  # flag --listen",
        "retention_days = 45  # file",
        "poll_interval_secs = 7  # env WARREN_BROKER_PROD_POLL_INTERVAL_SECS",
        "user = \"warren\"  # file",
        "database = \"warren.db\"  # default",
    ] {
        assert!(printed.lines().any(|l| l == line), "no line {line:?} in:\n{printed}");
    }
    let secret_lines = [
        "the password of broker \"prod\": env PROD_PW (named by file)".to_string(),
        format!("the url of notification channel \"ops\": read from {} (path from file)", secret_file.display()),
        "the password of notification channel \"mail\": env SMTP_PW (named by env WARREN_NOTIFICATION_MAIL_PASSWORD_ENV)"
            .to_string(),
    ];
    for line in secret_lines {
        assert!(printed.contains(&line), "no {line:?} in:\n{printed}");
    }
}

/// Issue 34, case 9: `--version` printed "warren 0.1.0" with no commit, and `warren version` was
/// an error. Both name the commit and its date; under CI (which exports WARREN_COMMIT for the
/// build) the commit is the one built, never "unknown".
#[test]
fn the_version_names_the_commit_it_was_built_from() {
    let (ok, version) = warren(&["version"]);
    assert!(ok, "{version}");
    let (ok, flag) = warren(&["--version"]);
    assert!(ok, "{flag}");
    assert_eq!(version.trim(), flag.trim());
    assert!(version.starts_with(&format!("warren {} (commit ", env!("CARGO_PKG_VERSION"))), "{version}");
    assert!(version.contains(", committed "), "{version}");
    if let Ok(commit) = std::env::var("WARREN_COMMIT") {
        assert!(version.contains(&format!("(commit {commit}, ")), "{version} was not built from {commit}");
    }
}

/// Issue 34, case 5: the first admin made on the command line was not audited, and no command
/// changed a role, so the last admin could not hand over.
#[test]
fn account_commands_change_roles_and_are_audited() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("w.db");
    let db = db.to_str().unwrap();
    let add = |name: &str, role: &str| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_warren"))
            .args(["user", "add", name, "--role", role, "--database", db])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(b"correct horse battery staple\n").unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    add("root", "admin");
    let (ok, said) = warren(&["user", "role", "root", "--role", "viewer", "--database", db]);
    assert!(!ok && said.contains("last enabled admin"), "{said}");
    add("ops", "operator");
    let (ok, said) = warren(&["user", "role", "ops", "--role", "admin", "--database", db]);
    assert!(ok && said.contains("ops is now admin"), "{said}");
    let (ok, said) = warren(&["user", "role", "root", "--role", "viewer", "--database", db]);
    assert!(ok, "{said}");
    let (_, list) = warren(&["user", "list", "--database", db]);
    assert!(list.contains("root\tviewer") && list.contains("ops\tadmin"), "{list}");
    let audited = Command::new("python3")
        .args(["-c", "import sqlite3,sys; print('\\n'.join(a for (a,) in sqlite3.connect(sys.argv[1]).execute(\"select action from audit_log where actor like 'command line%' order by id\")))", db])
        .output()
        .unwrap();
    let audited = String::from_utf8_lossy(&audited.stdout);
    assert_eq!(audited.lines().collect::<Vec<_>>(), ["user add", "user add", "user role", "user role"], "{audited}");
}

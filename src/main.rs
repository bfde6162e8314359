//! Command line: parse it and hand over to the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

// A poll of 10,000 queues allocates and frees tens of thousands of small strings and maps; with
// glibc's allocator a third of the poll's CPU went to malloc and free (measured with perf in
// benches/poll.rs). mimalloc roughly halves that.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use warren::config::{Config, Overrides};

#[derive(Parser)]
#[command(name = "warren", version = warren::VERSION_LINE, about = "A web dashboard for RabbitMQ")]
struct Cli {
    /// Configuration file (TOML); also WARREN_CONFIG.
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// Log lines as `text` or `json` (one object per line, for a log collector); also
    /// WARREN_LOG_FORMAT. Colours only on a terminal, and never with NO_COLOR set.
    #[arg(long, global = true, env = "WARREN_LOG_FORMAT", default_value = "text")]
    log_format: LogFormat,
    // `warren` alone serves: it takes `serve`'s flags.
    #[command(flatten)]
    serve: ServeArgs,
    #[command(subcommand)]
    command: Option<Command>,
}

/// The flags of the dashboard itself; each command shows only the flags it uses.
#[derive(Args, Default, Clone)]
struct ServeArgs {
    /// Address to listen on (default 127.0.0.1:8080); also WARREN_LISTEN.
    #[arg(long)]
    listen: Option<String>,
    /// Days of history to keep (hour roll-ups; default 30); also WARREN_RETENTION_DAYS.
    #[arg(long)]
    retention_days: Option<u64>,
    /// Seconds between polls of the (single) broker (default 10).
    #[arg(long)]
    poll_interval_secs: Option<u64>,
    #[command(flatten)]
    database: DatabaseArgs,
    #[command(flatten)]
    broker: BrokerArgs,
}

#[derive(Args, Default, Clone)]
struct DatabaseArgs {
    /// SQLite database file (default warren.db); also WARREN_DATABASE.
    #[arg(long)]
    database: Option<PathBuf>,
    /// postgres://... (or sqlite:PATH) instead of the SQLite file; also WARREN_DATABASE_URL
    /// (or _FILE, _ENV), which keeps its password out of the process list.
    #[arg(long)]
    database_url: Option<String>,
}

/// `--database` for `user`, `token` and `backup`, anywhere after them (`warren user add ada --database x`).
#[derive(Args, Default, Clone)]
struct AccountsDatabase {
    /// SQLite database file (default warren.db); also WARREN_DATABASE.
    #[arg(long, global = true)]
    database: Option<PathBuf>,
    /// postgres://... (or sqlite:PATH) instead of the SQLite file; also WARREN_DATABASE_URL.
    #[arg(long, global = true)]
    database_url: Option<String>,
}

/// How to reach the (single) broker.
#[derive(Args, Default, Clone)]
struct BrokerArgs {
    /// Management API URL of the (single) broker.
    #[arg(long)]
    management_url: Option<String>,
    /// Management API user of the (single) broker.
    #[arg(long)]
    user: Option<String>,
    /// File holding the broker password (never pass a password as a flag).
    #[arg(long)]
    password_file: Option<PathBuf>,
    /// AMQP URL of the (single) broker, without credentials.
    #[arg(long)]
    amqp_url: Option<String>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the dashboard (the default).
    Serve(ServeArgs),
    /// Print the version, the commit warren was built from and its date (as `--version`).
    Version,
    /// Check the configuration and print it as TOML (without secrets).
    CheckConfig(ServeArgs),
    /// Exit 0 if the running warren answers /healthz (for container health checks).
    Healthcheck {
        /// The address warren listens on (default: the configuration's); also WARREN_LISTEN.
        #[arg(long)]
        listen: Option<String>,
    },
    /// Make live demo traffic on the (first) configured broker, until Ctrl-C.
    Demo {
        /// Delete the demo vhost instead.
        #[arg(long)]
        cleanup: bool,
        /// The vhost the demo uses.
        #[arg(long, default_value = "warren-demo")]
        vhost: String,
        #[command(flatten)]
        broker: BrokerArgs,
    },
    /// Manage local accounts (stored in the database; a running warren sees changes at once).
    User {
        #[command(flatten)]
        database: AccountsDatabase,
        #[command(subcommand)]
        command: UserCommand,
    },
    /// Write a consistent copy of the database (while warren runs) to PATH, a new file readable
    /// by its owner only. To restore: stop warren, put the copy at the database's path (with no
    /// -wal or -shm file beside it), start warren.
    Backup {
        /// Where the copy goes; an existing file is refused.
        path: PathBuf,
        #[command(flatten)]
        database: AccountsDatabase,
    },
    /// Copy the database into an empty PostgreSQL database, creating its schema first (the start
    /// of a move to PostgreSQL; warren does not run on it yet). Safe while warren runs: the copy
    /// reads one consistent snapshot, and PostgreSQL keeps all of it or nothing.
    CopyToPostgres {
        /// The target, `postgres://USER@HOST:PORT/DATABASE` (a password in the URL, or in
        /// PGPASSWORD or ~/.pgpass).
        url: String,
        #[command(flatten)]
        database: AccountsDatabase,
    },
    /// Manage API tokens for scripts (sent as `Authorization: Bearer wrn_...`).
    Token {
        #[command(flatten)]
        database: AccountsDatabase,
        #[command(subcommand)]
        command: TokenCommand,
    },
}

impl ServeArgs {
    /// These flags over `under` (the ones given before the command): a flag given after the
    /// command wins.
    fn over(self, under: ServeArgs) -> ServeArgs {
        ServeArgs {
            listen: self.listen.or(under.listen),
            retention_days: self.retention_days.or(under.retention_days),
            poll_interval_secs: self.poll_interval_secs.or(under.poll_interval_secs),
            database: DatabaseArgs {
                database: self.database.database.or(under.database.database),
                database_url: self.database.database_url.or(under.database.database_url),
            },
            broker: BrokerArgs {
                management_url: self.broker.management_url.or(under.broker.management_url),
                user: self.broker.user.or(under.broker.user),
                password_file: self.broker.password_file.or(under.broker.password_file),
                amqp_url: self.broker.amqp_url.or(under.broker.amqp_url),
            },
        }
    }
}

#[derive(Subcommand)]
enum UserCommand {
    /// Create a user. The password is read from standard input (asked twice on a terminal).
    Add {
        name: String,
        /// viewer (reads), operator (also moves messages, silences alerts), admin (everything).
        #[arg(long)]
        role: String,
    },
    /// Set a user's password (read like `add`); ends the user's sessions.
    Passwd { name: String },
    /// Remove a user and end their sessions.
    Remove { name: String },
    /// Change a user's role (the last enabled admin keeps it); it applies at their next request.
    Role {
        name: String,
        /// viewer, operator or admin.
        #[arg(long)]
        role: String,
    },
    /// List users and their roles.
    List,
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Create a token; it is printed once and stored only as a hash.
    Add {
        name: String,
        #[arg(long)]
        role: String,
    },
    /// List tokens (never their values).
    List,
    /// Revoke a token by id.
    Revoke { id: i64 },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// Log lines to stdout: `RUST_LOG` picks what (default `warren=info,tower_http=warn`).
fn init_logs(format: LogFormat) {
    use std::io::IsTerminal;
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warren=info,tower_http=warn".into());
    let colour = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let logs = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Text => logs.with_ansi(colour).init(),
        LogFormat::Json => logs.json().with_ansi(false).flatten_event(true).with_current_span(false).init(),
    }
}

fn main() -> ExitCode {
    warren::memory::purge_freed_pages_at_once();
    let cli = Cli::parse();
    init_logs(cli.log_format);
    let command = cli.command.unwrap_or(Command::Serve(ServeArgs::default()));
    if matches!(command, Command::Version) {
        // Needs no configuration: it must answer where none can be read.
        println!("warren {}", warren::VERSION_LINE);
        return ExitCode::SUCCESS;
    }
    // What each command takes of the flags; the rest come from the file and the environment.
    let flags = match &command {
        Command::Serve(args) | Command::CheckConfig(args) => args.clone().over(cli.serve),
        Command::Version => ServeArgs::default().over(cli.serve),
        Command::Healthcheck { listen } => ServeArgs { listen: listen.clone(), ..ServeArgs::default() }.over(cli.serve),
        Command::Demo { broker, .. } => ServeArgs { broker: broker.clone(), ..ServeArgs::default() }.over(cli.serve),
        Command::User { database, .. }
        | Command::Token { database, .. }
        | Command::Backup { database, .. }
        | Command::CopyToPostgres { database, .. } => {
            let database =
                DatabaseArgs { database: database.database.clone(), database_url: database.database_url.clone() };
            ServeArgs { database, ..ServeArgs::default() }.over(cli.serve)
        }
    };
    let overrides = Overrides {
        config_path: cli.config,
        listen: flags.listen,
        database: flags.database.database,
        database_url: flags.database.database_url,
        retention_days: flags.retention_days,
        management_url: flags.broker.management_url,
        user: flags.broker.user,
        password_file: flags.broker.password_file,
        amqp_url: flags.broker.amqp_url,
        poll_interval_secs: flags.poll_interval_secs,
    };
    let (config, sources) = match Config::load_explained(&overrides) {
        Ok(loaded) => loaded,
        Err(e) => {
            eprintln!("warren: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = warren::Wings::read(&config) {
        eprintln!("warren: {e}");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("warren: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match command {
            Command::Serve(_) => serve(config).await,
            Command::CheckConfig(_) => {
                print!("{}", config.to_toml_explained(&sources));
                Ok(())
            }
            Command::Demo { cleanup, vhost, .. } => demo(config, cleanup, vhost).await,
            Command::Healthcheck { .. } => healthcheck(config).await,
            Command::User { command, .. } => user(config, command).await,
            Command::Token { command, .. } => token(config, command).await,
            Command::Backup { path, .. } => backup(config, path).await,
            Command::CopyToPostgres { url, .. } => copy_to_postgres(config, &url).await,
            Command::Version => Ok(()), // answered before the configuration is read
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("warren: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The new password: from the terminal without echo (twice), or the first line of stdin.
fn read_password(name: &str) -> anyhow::Result<String> {
    use std::io::IsTerminal;
    if std::io::stdin().is_terminal() {
        let first = rpassword::prompt_password(format!("Password for {name}: "))?;
        let again = rpassword::prompt_password("Again: ")?;
        anyhow::ensure!(first == again, "the passwords differ; nothing changed");
        return Ok(first);
    }
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    Ok(line.trim_end_matches(['\r', '\n']).to_string())
}

async fn user(config: Config, command: UserCommand) -> anyhow::Result<()> {
    use warren::auth;
    let db = warren::open_store(&config).await?;
    // Account changes on the command line are audited like the Users page's, by the local
    // account that made them (issue 34, case 5: the first admin made here left no entry).
    let actor = format!("command line ({})", std::env::var("USER").unwrap_or_else(|_| "unknown user".into()));
    let audit = |action: &'static str, request: serde_json::Value| {
        let (db, actor) = (db.clone(), actor.clone());
        async move { warren::audit::account(&db, &actor, action, &request).await }
    };
    match command {
        UserCommand::Add { name, role } => {
            let role: auth::Role = role.parse()?;
            let password = read_password(&name)?;
            auth::add_user(&db, &name, role, &password).await?;
            audit("user add", serde_json::json!({"name": name, "role": role})).await?;
            match config.database_url {
                None => println!("user {name} ({role}) created in {}", config.database.display()),
                Some(_) => println!("user {name} ({role}) created in the PostgreSQL database of database_url"),
            }
            println!("warren now requires logins; it may also listen on addresses other than loopback");
        }
        UserCommand::Passwd { name } => {
            let password = read_password(&name)?;
            let ended = auth::set_password(&db, &name, &password).await?;
            audit("user password", serde_json::json!({"name": name})).await?;
            println!("password of {name} changed; {ended} session(s) ended");
        }
        UserCommand::Remove { name } => {
            auth::remove_user(&db, &name).await?;
            audit("user remove", serde_json::json!({"name": name})).await?;
            println!("user {name} removed");
        }
        UserCommand::Role { name, role } => {
            let role: auth::Role = role.parse()?;
            auth::set_role(&db, &name, role).await?;
            audit("user role", serde_json::json!({"name": name, "role": role})).await?;
            println!("{name} is now {role}");
        }
        UserCommand::List => {
            for u in auth::list_users(&db).await? {
                let disabled = if u.disabled { " (disabled)" } else { "" };
                println!("{}\t{}{disabled}", u.name, u.role);
            }
        }
    }
    db.close().await;
    Ok(())
}

async fn token(config: Config, command: TokenCommand) -> anyhow::Result<()> {
    use warren::auth;
    let db = warren::open_store(&config).await?;
    match command {
        TokenCommand::Add { name, role } => {
            let role: auth::Role = role.parse()?;
            let now = chrono::Utc::now().timestamp();
            let created = auth::create_token(&db, &name, role, "cli", now).await?;
            println!("{}", created.token);
            eprintln!("token {name} ({role}, id {}) created; it is shown only now", created.id);
        }
        TokenCommand::List => {
            for t in auth::list_tokens(&db).await? {
                let state = if t.revoked { "revoked" } else { "live" };
                println!("{}\t{}\t{}\t{state}\tcreated by {}", t.id, t.name, t.role, t.created_by);
            }
        }
        TokenCommand::Revoke { id } => {
            auth::revoke_token(&db, id).await?;
            println!("token {id} revoked");
        }
    }
    db.close().await;
    Ok(())
}

async fn backup(config: Config, to: PathBuf) -> anyhow::Result<()> {
    // PostgreSQL has its own tools, which also copy a live database consistently.
    anyhow::ensure!(
        config.database_url.is_none(),
        "warren backup copies a SQLite file; for PostgreSQL use pg_dump (docs/operations.md)"
    );
    let db = warren::history::open(&config.database).await?;
    let started = std::time::Instant::now();
    let copied = warren::history::backup(&db, &to).await;
    db.close().await;
    let bytes =
        copied.map_err(|e| anyhow::anyhow!("backing up {} to {}: {e}", config.database.display(), to.display()))?;
    println!(
        "{} copied to {} ({bytes} bytes, checked, {:.2} s)",
        config.database.display(),
        to.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

async fn copy_to_postgres(config: Config, url: &str) -> anyhow::Result<()> {
    let db = warren::history::open(&config.database).await?;
    let started = std::time::Instant::now();
    let copied = async {
        let pg = warren::history::postgres::open(url).await?;
        let copied = warren::history::postgres::copy_from_sqlite(&db, &pg).await;
        pg.close().await;
        copied
    }
    .await;
    db.close().await;
    let copied = copied.map_err(|e| anyhow::anyhow!("copying {} to PostgreSQL: {e}", config.database.display()))?;
    for (table, rows) in &copied {
        println!("{table}: {rows} rows");
    }
    println!(
        "{} copied to PostgreSQL ({} rows, counted on both sides, {:.2} s)",
        config.database.display(),
        copied.values().sum::<u64>(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.listen))?;
    warren::run(config, listener, shutdown_signal()).await
}

async fn demo(config: Config, cleanup: bool, vhost: String) -> anyhow::Result<()> {
    let broker = &config.brokers[0];
    let target = warren::demo::DemoTarget {
        management_url: broker.management_url.to_string(),
        user: broker.user.clone(),
        password: broker.password.expose().to_string(),
        amqp_url: broker.amqp_url.clone(),
        vhost,
    };
    if cleanup {
        return warren::demo::cleanup(&target).await;
    }
    let cancel = tokio_util::sync::CancellationToken::new();
    let on_signal = cancel.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        on_signal.cancel();
    });
    warren::demo::run(&target, cancel).await
}

async fn healthcheck(config: Config) -> anyhow::Result<()> {
    // A server bound to all interfaces answers on loopback.
    let mut addr = config.listen;
    if addr.ip().is_unspecified() {
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let url = format!("http://{addr}/healthz");
    let response = reqwest::Client::new()
        .get(&url)
        .timeout(std::time::Duration::from_secs(3))
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("{url}: {e}"))?;
    anyhow::ensure!(response.status().is_success(), "{url} answered {}", response.status());
    Ok(())
}

/// Ctrl-C or SIGTERM (what `docker stop` sends).
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = terminate => {}
    }
    tracing::info!("shutting down");
}

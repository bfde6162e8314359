//! `AppState`: the handles every handler and background loop shares, built by one function.

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::Config;
use crate::dlq::browse::Snapshots;
use crate::live::Live;

/// Each wing's part of the configuration in the wing's own types, read and checked before
/// anything starts: the configuration is plain data that imports nothing of the wings, so an
/// invalid part is found here, by the start and by every command (`main` reads it after the
/// configuration), and named by its field as any invalid configuration is.
pub struct Wings {
    /// `[[alerts]]`.
    pub rules: Vec<crate::alerts::Rule>,
    /// `[[notifications]]`.
    pub channels: Vec<crate::alerts::notify::NotificationChannel>,
    /// `[auth.proxy]`.
    pub proxy: Option<crate::auth::ProxyAuth>,
}

impl Wings {
    pub fn read(config: &Config) -> Result<Wings, crate::config::ConfigError> {
        Ok(Wings {
            rules: crate::alerts::Rule::from_config(config)?,
            channels: crate::alerts::notify::NotificationChannel::from_config(config)?,
            proxy: config.auth.proxy.as_ref().map(crate::auth::ProxyAuth::from_config).transpose()?,
        })
    }
}

#[derive(Clone)]
pub struct AppState {
    pub config: Arc<Config>,
    /// What warren keeps: SQLite or PostgreSQL, behind the storage interface (`storage`).
    pub store: crate::storage::Store,
    pub live: Live,
    /// The alert rules of the file (`[[alerts]]`), as the alerts wing read them.
    pub config_rules: Arc<Vec<crate::alerts::Rule>>,
    /// Broker name to its id in the database.
    pub broker_ids: Arc<HashMap<String, i64>>,
    /// The last DLQ snapshot of each queue.
    pub snapshots: Snapshots,
    /// Running and recent moves.
    pub jobs: crate::dlq::jobs::Jobs,
    /// Dead letters in warren's custody: the intake of each queue a `[[custody]]` rule names.
    pub custody: crate::dlq::custody::Custody,
    /// Sends alert notifications in the background.
    pub notifier: crate::alerts::notify::Dispatcher,
    /// Who must log in, the login throttle, CSRF tokens without a session.
    pub gate: Arc<crate::auth::Gate>,
    /// Whether the database can be written, apart from the brokers' health.
    pub storage: Arc<crate::history::storage::Storage>,
    /// What a form did, for the page it redirects to.
    pub notices: Notices,
    /// The threads and time filters' regular expressions match in, and their stop at shutdown.
    pub matchers: crate::dlq::budget::Matchers,
    /// This process as one of the replicas on the database: which brokers' work it holds now
    /// (`replicas`). On SQLite it is the only one and holds all of it.
    pub replica: Arc<crate::replicas::Replica>,
    /// The path of `public_url` (`Config::base_path`), kept once: every link of every page
    /// starts with it.
    pub base_path: Arc<str>,
}

/// One-time notices for post/redirect/get: a form's handler keeps what it did here and
/// redirects with the key; the page it lands on shows it once. A reload then shows the page,
/// never a second submission. In memory (the last `KEEP` only): a notice is for the next second.
#[derive(Clone, Default)]
pub struct Notices {
    kept: Arc<std::sync::Mutex<std::collections::VecDeque<(String, Notice)>>>,
}

/// What a form did: `ok` false for a failure worth showing as an error.
#[derive(Clone, Debug)]
pub struct Notice {
    pub ok: bool,
    pub text: String,
}

impl Notices {
    const KEEP: usize = 256;

    /// Keeps `notice`; returns its key (random: a link cannot show someone a notice of its own).
    pub fn put(&self, ok: bool, text: String) -> String {
        use rand::Rng;
        let key = format!("{:016x}", rand::thread_rng().gen::<u64>());
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.push_back((key.clone(), Notice { ok, text }));
        while kept.len() > Self::KEEP {
            kept.pop_front();
        }
        key
    }

    /// The notice under `key`, once.
    pub fn take(&self, key: &str) -> Option<Notice> {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        let at = kept.iter().position(|(k, _)| k == key)?;
        kept.remove(at).map(|(_, notice)| notice)
    }
}

impl AppState {
    /// A configured broker by name.
    pub fn broker_config(&self, name: &str) -> Option<&crate::config::BrokerConfig> {
        self.config.brokers.iter().find(|b| b.name == name)
    }

    /// What the alert loop uses of the shared handles.
    pub fn alerts(&self) -> crate::alerts::runner::Handles {
        crate::alerts::runner::Handles {
            config: self.config.clone(),
            db: self.store.clone(),
            live: self.live.clone(),
            config_rules: self.config_rules.clone(),
            notifier: self.notifier.clone(),
            replica: self.replica.clone(),
        }
    }

    /// What the dead-letter wing's jobs use of the shared handles.
    pub fn dlq(&self) -> crate::dlq::jobs::Handles {
        crate::dlq::jobs::Handles {
            config: self.config.clone(),
            store: self.store.clone(),
            storage: self.storage.clone(),
            live: self.live.clone(),
            snapshots: self.snapshots.clone(),
            jobs: self.jobs.clone(),
            replica: self.replica.clone(),
        }
    }

    /// `path`, one of warren's own (`/jobs/7`, as routes and handlers know them), as the browser
    /// asks for it: under the base path. For redirects and the links in JSON answers; templates
    /// write `{{ me.base }}` (or a fragment's `base`) before each URL themselves.
    pub fn href(&self, path: &str) -> String {
        format!("{}{path}", self.base_path)
    }

    pub fn new(config: Config, wings: Wings, store: crate::storage::Store, broker_ids: HashMap<String, i64>) -> Self {
        let names: Vec<String> = config.brokers.iter().map(|b| b.name.clone()).collect();
        let http = reqwest::Client::builder()
            .user_agent(concat!("warren/", env!("CARGO_PKG_VERSION")))
            .build()
            .expect("TLS backend initialises");
        let alerts = crate::alerts::notify::AlertSource {
            config_rules: wings.rules.clone(),
            public_url: config.public_url.clone(),
            resend_under: None,
        };
        let gate = Arc::new(crate::auth::Gate::new(config.auth.clone(), wings.proxy));
        // The file checks (deleted, replaced) are SQLite's; a server's faults show in the probe.
        let storage = match config.database_url {
            None => crate::history::storage::Storage::new(&config.database),
            Some(_) => crate::history::storage::Storage::server(),
        };
        let storage = Arc::new(storage);
        let work = names.iter().map(|b| crate::replicas::broker_work(b)).chain([crate::replicas::HOUSEKEEPING.into()]);
        let replica = crate::replicas::Replica::new(store.clone(), config.lease_time, work.collect());
        let custody = crate::dlq::custody::Custody::new(store.clone(), storage.clone()).under_leases(replica.clone());
        // The replica's id names its claims on outbox rows: each notification is delivered by one
        // replica at a time.
        let claimer = replica.id().to_string();
        let alerts = crate::alerts::notify::AlertSource { resend_under: Some(replica.clone()), ..alerts };
        // Several replicas share a PostgreSQL outbox: another may have a channel this one lacks.
        let policy = crate::alerts::notify::DeliveryPolicy {
            unknown_channel_grace: match config.database_url {
                None => std::time::Duration::ZERO,
                Some(_) => crate::alerts::notify::REPLICAS_UNKNOWN_CHANNEL_GRACE,
            },
            ..Default::default()
        };
        let notifier = crate::alerts::notify::Dispatcher::with_alerts(http, store.clone(), policy, alerts, claimer);
        notifier.set_channels(wings.channels);
        AppState {
            replica,
            base_path: config.base_path().into(),
            gate,
            storage: storage.clone(),
            config: Arc::new(config),
            store,
            live: Live::new(&names),
            config_rules: Arc::new(wings.rules),
            broker_ids: Arc::new(broker_ids),
            snapshots: Snapshots::default(),
            jobs: crate::dlq::jobs::Jobs::default(),
            custody,
            notifier,
            notices: Notices::default(),
            matchers: crate::dlq::budget::Matchers::new(),
        }
    }
}

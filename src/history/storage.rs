//! Whether warren's own database can be written, told apart from the brokers' health (issue 16,
//! case 7: on a full disk a requeue ran with no audit row, database files deleted while warren
//! ran went unnoticed with `/readyz` still true, and a failed history write showed the broker as
//! down).
//!
//! Two things are checked, by `/readyz` and before every action that must be audited:
//! - the database file is still the one warren opened: SQLite keeps writing to a file that was
//!   deleted (or replaced) under it, and everything written after that is lost at the next start;
//! - a write goes through: a row of `storage_probe` is updated, in a transaction of its own, so a
//!   full disk, a read-only file system or a lock held elsewhere shows up as what it is.
//!
//! Writers that fail elsewhere (the poller's history, the delivery log) report it here too, so
//! every page can say that the database is the problem, whichever write met it first.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::storage::Database;

/// The database file and what is known of its health.
#[derive(Debug)]
pub struct Storage {
    /// The SQLite file; `None` on PostgreSQL, whose files are the server's to keep (a server that
    /// lost them fails the write check).
    path: Option<PathBuf>,
    /// The file's absolute path as the kernel names it in `/proc/self/fd` (`open_but_deleted`).
    absolute: Option<PathBuf>,
    /// (device, inode) of the file when warren opened it.
    identity: Option<(u64, u64)>,
    last_problem: Mutex<Option<Problem>>,
}

/// A storage fault as pages and `/readyz` show it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Problem {
    pub at: DateTime<Utc>,
    /// What failed: "the write check", "the history write", "the audit log", ...
    pub during: String,
    /// The fault in words, with SQLite's own message.
    pub message: String,
}

impl Storage {
    /// Remembers which file the database is, right after it was opened.
    pub fn new(path: &Path) -> Storage {
        Storage {
            path: Some(path.to_path_buf()),
            absolute: std::fs::canonicalize(path).ok(),
            identity: identity(path),
            last_problem: Mutex::new(None),
        }
    }

    /// A database on a server (PostgreSQL): no file here to check, only writes.
    pub fn server() -> Storage {
        Storage { path: None, absolute: None, identity: None, last_problem: Mutex::new(None) }
    }

    /// The last fault seen, unless a check or write has succeeded since.
    pub fn problem(&self) -> Option<Problem> {
        self.last_problem.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Records a failed write; returns the fault in words.
    pub fn failed(&self, during: &str, error: &sqlx::Error) -> String {
        let message = describe(error);
        tracing::error!(during, error = %message, "the database cannot be written");
        self.set(Some(Problem { at: Utc::now(), during: during.to_string(), message: message.clone() }));
        message
    }

    /// Records a failed read when it says the database cannot be read (a disk, a file, a lock)
    /// and returns the fault in words; `None` for a read that failed on what it was asked (a
    /// LIKE pattern SQLite finds too complex, a JSON path it cannot parse): that is no fault of
    /// the database, and every page saying it is would send the operator to a healthy disk.
    pub fn read_failed(&self, during: &str, error: &sqlx::Error) -> Option<String> {
        if !is_storage_fault(error) {
            tracing::warn!(during, error = %error, "a read failed on what it was asked");
            return None;
        }
        Some(self.failed(during, error))
    }

    /// Records that a write went through: whatever failed before is over. A file that is no
    /// longer the one opened stays a problem: writes to it still succeed, and are still lost.
    pub fn succeeded(&self) {
        if self.file_problem().is_none() {
            self.set(None);
        }
    }

    /// Checks the file and makes one write; `Err` holds the fault in words.
    pub async fn check(&self, db: &dyn Database) -> Result<(), String> {
        self.file_check()?;
        let at = Utc::now().timestamp_millis();
        match db.probe(at).await {
            Ok(written) if written == at => {
                self.set(None);
                Ok(())
            }
            // The statement answered with a value other than the one it was given: whatever
            // holds the data is not keeping what it is told.
            Ok(written) => {
                let error = sqlx::Error::Protocol(format!("the write check wrote {at} and read back {written}"));
                Err(self.failed("the write check", &error))
            }
            Err(e) => Err(self.failed("the write check", &e)),
        }
    }

    /// Checks only that the file is still the one opened, with its journal (no write): cheap
    /// enough to run before every ack of custody's intake, whose commits are lost with the file
    /// (issue 29, case 2: intake acked 4,000 messages into a deleted file).
    pub fn file_check(&self) -> Result<(), String> {
        match self.file_problem() {
            None => Ok(()),
            Some(message) => {
                let during = "the file check".to_string();
                self.set(Some(Problem { at: Utc::now(), during, message: message.clone() }));
                Err(message)
            }
        }
    }

    fn file_problem(&self) -> Option<String> {
        let file = self.path.as_ref()?;
        if let Some(deleted) = self.absolute.as_deref().and_then(open_but_deleted) {
            return Some(format!(
                "{} was deleted while warren runs and SQLite still writes to it: what warren writes now is lost \
                 when it stops; restart warren",
                deleted.display()
            ));
        }
        let path = file.display();
        match (std::fs::metadata(file), self.identity) {
            (Err(e), _) if e.kind() == std::io::ErrorKind::NotFound => Some(format!(
                "the database file {path} was deleted while warren runs: what warren writes now is lost when it \
                 stops; restart warren to start a new database, or restore the file"
            )),
            (Err(e), _) => Some(format!("the database file {path} cannot be read: {e}")),
            (Ok(m), Some(opened)) if (m.dev(), m.ino()) != opened => Some(format!(
                "the database file {path} was replaced while warren runs: warren still writes to the file it \
                 opened, and that is lost when it stops; restart warren"
            )),
            _ => None,
        }
    }

    fn set(&self, problem: Option<Problem>) {
        *self.last_problem.lock().unwrap_or_else(|p| p.into_inner()) = problem;
    }
}

/// A file of the database (`x.db`, `x.db-wal`, `x.db-shm`) that this process holds open and
/// that is no longer in the directory: deleting the write-ahead log alone leaves the main file in
/// place, and every commit since goes to the deleted log. The kernel names such a descriptor
/// "<path> (deleted)" under `/proc/self/fd` (Linux; elsewhere nothing is found).
fn open_but_deleted(absolute: &Path) -> Option<PathBuf> {
    let base = absolute.as_os_str().to_string_lossy().into_owned();
    let ours = [base.clone(), format!("{base}-wal"), format!("{base}-shm")];
    for entry in std::fs::read_dir("/proc/self/fd").ok()?.flatten() {
        let Ok(target) = std::fs::read_link(entry.path()) else { continue };
        let target = target.to_string_lossy();
        if let Some(name) = target.strip_suffix(" (deleted)") {
            if ours.iter().any(|o| o == name) {
                return Some(PathBuf::from(name));
            }
        }
    }
    None
}

fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Whether an error says the database cannot be used (its file, its disk, a lock, the pool),
/// rather than that SQLite refused the query it was given.
pub fn is_storage_fault(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => {
            let code = db.code().and_then(|c| c.parse::<i64>().ok()).map(|c| c & 0xff);
            matches!(code, Some(5 | 6 | 8 | 10 | 11 | 13 | 14 | 26) | None)
        }
        _ => false,
    }
}

/// A database error in words an operator acts on, with SQLite's own message.
pub fn describe(error: &sqlx::Error) -> String {
    let Some(db) = error.as_database_error() else {
        return format!("the database failed: {error}");
    };
    // SQLite's primary result code is the low byte of the extended one.
    let code = db.code().and_then(|c| c.parse::<i64>().ok()).map(|c| c & 0xff);
    let what = match code {
        Some(13) => "the disk holding the database is full",
        Some(8) => "the database is read-only (a read-only file system or file)",
        Some(5 | 6) => "the database is locked by another process",
        Some(10) => "the disk holding the database failed to read or write",
        Some(14) => "the database file cannot be opened",
        Some(11 | 26) => "the database file is corrupt",
        _ => "the database failed",
    };
    format!("{what} ({})", db.message())
}

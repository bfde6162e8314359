// `sqlx::migrate!` embeds migrations/sqlite/ at compile time; without this, a change to a migration
// alone would not rebuild the crate. `WARREN_COMMIT` and `WARREN_COMMIT_DATE` (set by CI and
// the image build) name the commit `--version` and `/metrics` report; without them they are
// "unknown", never a stale value from an earlier build.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
    for (from, to) in [("WARREN_COMMIT", "WARREN_BUILD_COMMIT"), ("WARREN_COMMIT_DATE", "WARREN_BUILD_COMMIT_DATE")] {
        println!("cargo:rerun-if-env-changed={from}");
        let value = std::env::var(from).ok().filter(|v| !v.trim().is_empty()).unwrap_or_else(|| "unknown".into());
        println!("cargo:rustc-env={to}={}", value.trim());
    }
}

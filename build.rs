// `sqlx::migrate!` embeds migrations/ at compile time; without this, a change to a migration
// alone would not rebuild the crate. `WARREN_COMMIT` (set by CI and the image build) is the
// commit `/metrics` names in `warren_build_info`; without it the commit is "unknown", never a
// stale one from an earlier build.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
    println!("cargo:rerun-if-env-changed=WARREN_COMMIT");
}

// `sqlx::migrate!` embeds migrations/ at compile time; without this, a change to a migration
// alone would not rebuild the crate.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}

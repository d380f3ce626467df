//! Rebuilds the engine when a migration changes: `sqlx::migrate!` embeds
//! the migration files at compile time.

fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}

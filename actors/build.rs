//! Rebuilds the engine when a migration changes: `sqlx::migrate!` embeds
//! the migration files at compile time. Also whether this build has a
//! PostgreSQL server for the store's tests (`tests/it/common/needs.rs`).

include!("../tests/it/common/needs.rs");

fn main() {
    println!("cargo:rerun-if-changed=../migrations");
    emit_needs(|need| need == "postgres");
}

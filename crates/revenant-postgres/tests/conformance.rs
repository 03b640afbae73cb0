//! The shared conformance suite on PostgreSQL: every case, unchanged, each on a fresh
//! schema (`tests/support`), so cases run in parallel on one server.
//!
//! The suite's factory cannot skip a test, so unlike `tests/store.rs` these cases fail
//! (with a message saying how to start a server) when no PostgreSQL answers.

mod support;

use std::sync::Arc;

use revenant_core::Store;

async fn fresh_store() -> Arc<dyn Store> {
    let db = support::TestDb::new().await.unwrap_or_else(|| {
        panic!(
            "no PostgreSQL server answers at {}; run `eval \"$(scripts/ensure-postgres.sh)\"` first",
            support::database_url()
        )
    });
    Arc::new(support::SchemaStore::new(db))
}

revenant_conformance::conformance_suite!(postgres, fresh_store());

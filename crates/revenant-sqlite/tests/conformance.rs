//! The shared conformance suite against SQLite: a fresh database file in its own
//! temporary directory per test, deleted when the test's store is dropped.

use std::sync::Arc;

use revenant_core::Store;
use revenant_sqlite::SqliteStore;

async fn fresh_store() -> Arc<dyn Store> {
    Arc::new(
        SqliteStore::open_temporary()
            .await
            .expect("open a temporary SQLite store"),
    )
}

revenant_conformance::conformance_suite!(sqlite, fresh_store());

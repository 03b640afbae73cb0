//! Schema migrations, applied by every constructor of [`crate::SqliteStore`] before it
//! returns.
//!
//! The files are `migrations/NNNN_<name>.sql`, embedded at compile time and applied
//! with sqlx's migrator on the writer connection, each in its own transaction, with
//! sqlx's ledger (`_sqlx_migrations`) in the same file: a SQLite database belongs to
//! revenant alone, so there is no application ledger to collide with (PostgreSQL keeps
//! its own, see that backend). Append a migration; never edit one that has shipped
//! (sqlx refuses a changed checksum). A failed migration is
//! [`revenant_core::StoreError::Backend`]: the schema needs a person.

use revenant_core::StoreError;
use sqlx::SqlitePool;

use crate::error;

/// Applies every migration not yet applied.
pub(crate) async fn run(writer: &SqlitePool) -> Result<(), StoreError> {
    sqlx::migrate!("./migrations")
        .run(writer)
        .await
        .map_err(error::migrate)
}

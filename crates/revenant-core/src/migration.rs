//! Schema migrations as the doors see them: which a backend knows, which a database
//! has applied, and whether opening a store may apply the rest.
//!
//! Each backend owns its migrations (its `migrations/` folder and `migrate.rs`); this
//! module only holds the words they share, so `revenant migrate` prints one shape for
//! every backend.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use crate::job::Timestamp;
use crate::InputError;

/// One schema migration of a backend, and whether the database has applied it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Migration {
    /// The migration's number (`0003_dependencies.sql` is 3); never reused.
    pub version: i64,
    /// Its name (`dependencies`).
    pub name: String,
    /// When the database applied it; `None` while it is pending.
    pub applied_at: Option<Timestamp>,
}

/// Whether opening a store applies the migrations the database lacks.
///
/// `Auto` (the default) is right for one process, or for a fleet on PostgreSQL, where
/// concurrent starts take turns on a lock and the first one migrates. `Never` is for
/// those who migrate apart from the deploy (`revenant migrate` as its own step): the
/// store then refuses to open a database that lacks a migration this version needs,
/// instead of changing the schema under running workers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum MigrateMode {
    /// Apply pending migrations when the store opens.
    #[default]
    Auto,
    /// Apply nothing; refuse to open while a migration is pending.
    Never,
}

impl MigrateMode {
    /// The mode's name: `auto` or `never`.
    pub fn as_str(self) -> &'static str {
        match self {
            MigrateMode::Auto => "auto",
            MigrateMode::Never => "never",
        }
    }
}

impl fmt::Display for MigrateMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for MigrateMode {
    type Err = InputError;

    /// ```
    /// use revenant_core::migration::MigrateMode;
    /// assert_eq!("never".parse::<MigrateMode>().unwrap(), MigrateMode::Never);
    /// assert!("sometimes".parse::<MigrateMode>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(MigrateMode::Auto),
            "never" => Ok(MigrateMode::Never),
            other => Err(InputError::new(
                "migrate",
                format!("{other:?} is not a migrate mode; use auto or never"),
            )),
        }
    }
}

/// The error a store opened with [`MigrateMode::Never`] gives when the database lacks
/// migrations: names them and says how to apply them.
pub fn pending_error(backend: &str, pending: &[Migration]) -> crate::StoreError {
    let names: Vec<String> = pending
        .iter()
        .map(|m| format!("{:04}_{}", m.version, m.name))
        .collect();
    crate::StoreError::Backend {
        message: format!(
            "the {backend} schema lacks migrations this version needs ({}) and migrations \
             are set to never; run `revenant migrate` first",
            names.join(", ")
        ),
        source: None,
    }
}

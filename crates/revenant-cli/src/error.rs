//! The CLI's errors and the exit code each one maps to.

use std::process::ExitCode;

use revenant::{InputError, StoreError};

/// Everything a command can fail with.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Bad flags or bad input: exit 2.
    #[error(transparent)]
    Input(#[from] InputError),
    /// The store refused or failed: exit 2 for bad input or an unsupported URL, 1
    /// otherwise.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Something else went wrong: exit 1.
    #[error("{0}")]
    Failed(String),
    /// Writing output failed (a closed pipe, a full disk): exit 1.
    #[error("cannot write output: {0}")]
    Io(#[from] std::io::Error),
}

impl CliError {
    /// 2 for bad usage or bad input, 1 for everything else.
    pub fn exit_code(&self) -> ExitCode {
        match self {
            CliError::Input(_) => ExitCode::from(2),
            CliError::Store(StoreError::Input(_) | StoreError::UnsupportedUrl { .. }) => {
                ExitCode::from(2)
            }
            _ => ExitCode::from(1),
        }
    }
}

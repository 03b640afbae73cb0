//! What `revenant --version` prints: the package version and the commit it was built
//! from (see build.rs), e.g. `revenant 0.1.0 (commit 2d2605f1a2b3)`. The commit is
//! `unknown` for a build without git and without `REVENANT_BUILD_COMMIT`, and ends in
//! `-dirty` when tracked files differed from it.

/// The version clap prints after the name.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("REVENANT_COMMIT"),
    ")"
);

//! Names the commit the binary is built from, for `revenant --version`:
//! `revenant 0.1.0 (commit 2d2605f1a2b3)`, with `-dirty` when tracked files differ from
//! that commit.
//!
//! In order: git, when this crate is tracked in the repository around it; else the
//! `REVENANT_BUILD_COMMIT` environment variable (for builds from a source tarball or a
//! published package, which have no `.git`); else `unknown`. Git is asked only about
//! this crate's own repository: a package unpacked inside some other checkout must not
//! report that checkout's commit.
//!
//! Cargo reruns this script when HEAD moves (a checkout, or a commit on the current
//! branch), when the index changes (a `git add`, a commit), when this crate's sources
//! change, or when `REVENANT_BUILD_COMMIT` changes. Its limit: an edit in another crate
//! that is not yet staged rebuilds the binary without rerunning this script, so the
//! `-dirty` mark can lag until the next `git add` or commit.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=REVENANT_BUILD_COMMIT");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src");
    let commit = from_git()
        .or_else(|| {
            std::env::var("REVENANT_BUILD_COMMIT")
                .ok()
                .map(|c| c.trim().to_string())
                .filter(|c| !c.is_empty())
        })
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=REVENANT_COMMIT={commit}");
}

/// The short commit (12 hex digits) and `-dirty` when tracked files changed; `None`
/// without git, outside a repository, or when this crate is not tracked in it.
fn from_git() -> Option<String> {
    let here = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?);
    // Tracked here, or the repository is someone else's.
    git(&here, &["ls-files", "--error-unmatch", "build.rs"])?;
    let commit = git(&here, &["rev-parse", "--short=12", "HEAD"])?;
    watch_head(&here);
    // `--untracked-files=no`: a stray file is not a change to the source. Optional
    // locks off, so asking does not rewrite the index this script watches.
    let status = git(&here, &["status", "--porcelain", "--untracked-files=no"])?;
    Some(if status.is_empty() {
        commit
    } else {
        format!("{commit}-dirty")
    })
}

/// Reruns the script when HEAD, the branch it points to, or the index changes. In a
/// worktree HEAD and the index live in the worktree's git directory and the branch in
/// the common one; `git rev-parse --git-path` resolves each.
fn watch_head(here: &Path) {
    let mut paths = vec![
        "HEAD".to_string(),
        "index".to_string(),
        "packed-refs".to_string(),
    ];
    if let Some(branch) = git(here, &["symbolic-ref", "-q", "HEAD"]) {
        paths.push(branch);
    }
    for path in paths {
        if let Some(file) = git(
            here,
            &["rev-parse", "--path-format=absolute", "--git-path", &path],
        ) {
            if Path::new(&file).exists() {
                println!("cargo:rerun-if-changed={file}");
            }
        }
    }
}

/// Runs git in `dir`; its trimmed output when it succeeds.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_OPTIONAL_LOCKS", "0")
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

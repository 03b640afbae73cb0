//! `revenant --version` names the commit the binary was built from (build.rs).

use std::process::Command;

/// The commit in `revenant 0.1.0 (commit 2d2605f1a2b3)`, checked for shape.
fn printed_commit(flag: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_revenant"))
        .arg(flag)
        .output()
        .expect("run revenant");
    assert!(out.status.success(), "{out:?}");
    let line = String::from_utf8(out.stdout).unwrap();
    let line = line.trim_end();
    let prefix = format!("revenant {} (commit ", env!("CARGO_PKG_VERSION"));
    let commit = line
        .strip_prefix(&prefix)
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("unexpected {flag}: {line:?}"));
    let hash = commit.strip_suffix("-dirty").unwrap_or(commit);
    assert!(
        hash == "unknown"
            || std::env::var("REVENANT_BUILD_COMMIT").is_ok()
            || (hash.len() == 12 && hash.chars().all(|c| c.is_ascii_hexdigit())),
        "not a 12-digit commit: {line:?}"
    );
    commit.to_string()
}

/// What git says HEAD is, when this crate is tracked in a repository (as build.rs asks).
fn git_head() -> Option<String> {
    let dir = env!("CARGO_MANIFEST_DIR");
    let git = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    git(&["ls-files", "--error-unmatch", "build.rs"])?;
    git(&["rev-parse", "--short=12", "HEAD"])
}

#[test]
fn version_names_the_commit_head_points_to() {
    let commit = printed_commit("--version");
    assert_eq!(printed_commit("-V"), commit);
    match git_head() {
        // Built and tested from the same checkout: the same commit. (The dirty mark
        // may differ: it is read when the build script last ran.)
        Some(head) => assert_eq!(commit.strip_suffix("-dirty").unwrap_or(&commit), head),
        // No git: the packager's variable, or `unknown`.
        None => assert_eq!(
            commit,
            std::env::var("REVENANT_BUILD_COMMIT").unwrap_or_else(|_| "unknown".into())
        ),
    }
}

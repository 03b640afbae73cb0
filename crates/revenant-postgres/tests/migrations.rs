//! The rolling-deploy rule: this backend's migrations only add (see
//! `revenant_conformance::migrations` and docs/deploy.md).

#[test]
fn migrations_only_add_so_the_previous_release_keeps_working() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
    let violations = revenant_conformance::migrations::check_dir(&dir);
    assert!(
        violations.is_empty(),
        "migrations that would break workers of the previous release during a rolling \
         deploy (add `{}` with the reason, or split the change over two releases): \
         {violations:#?}",
        revenant_conformance::migrations::MARKER
    );
}

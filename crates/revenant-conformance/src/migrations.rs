//! The rolling-deploy rule for migrations, checked on every backend's files.
//!
//! During a rolling deploy, workers of the old release run against the schema of the
//! new one. So a migration only adds: new tables, nullable columns or columns with a
//! default, new indexes and functions. It never drops, renames or retypes what an
//! earlier migration created, nor makes an existing column NOT NULL, in the release
//! whose code stops using it (that is a later release's migration, once no process of
//! the old code is left).
//!
//! [`check_additive`] refuses a file with such a statement unless the file carries the
//! marker `-- revenant: not additive: <why the old release is unaffected>`. The check
//! reads SQL text with comments stripped, not a parsed schema: it errs on the side of
//! refusing, and the marker is the way out, written down where a reviewer sees it.

use std::path::Path;

/// The marker that lets a migration break the rule, followed by its justification.
pub const MARKER: &str = "-- revenant: not additive:";

/// Why a migration breaks the rule: the file and the statement found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The file's name.
    pub file: String,
    /// What was found.
    pub found: String,
}

/// Checks every `*.sql` file of `dir` (in name order), returning the violations.
pub fn check_dir(dir: &Path) -> Vec<Violation> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|err| panic!("reading {}: {err}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "sql"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no migrations in {}", dir.display());
    let sources: Vec<(String, String)> = files
        .iter()
        .map(|path| {
            let name = path
                .file_name()
                .expect("file name")
                .to_string_lossy()
                .into_owned();
            let sql = std::fs::read_to_string(path)
                .unwrap_or_else(|err| panic!("reading {}: {err}", path.display()));
            (name, sql)
        })
        .collect();
    check_additive(&sources)
}

/// Checks migrations given as (file name, SQL), oldest first.
pub fn check_additive(files: &[(String, String)]) -> Vec<Violation> {
    let mut violations = Vec::new();
    let mut earlier_tables: Vec<String> = Vec::new();
    for (file, sql) in files {
        let marked = sql
            .lines()
            .any(|line| line.trim_start().starts_with(MARKER) && line.trim().len() > MARKER.len());
        let text = normalize(sql);
        let mut found = Vec::new();
        for statement in text.split(';') {
            let s = statement.trim();
            for banned in ["DROP COLUMN", "RENAME ", "SET NOT NULL", "SET DATA TYPE"] {
                if s.contains(banned) {
                    found.push(format!("{banned}: {s}"));
                }
            }
            if s.contains("ALTER COLUMN") && s.contains(" TYPE ") && !s.contains("SET DATA TYPE") {
                found.push(format!("ALTER COLUMN ... TYPE: {s}"));
            }
            if s.contains("ADD COLUMN") && s.contains("NOT NULL") && !s.contains("DEFAULT") {
                found.push(format!("ADD COLUMN ... NOT NULL without a DEFAULT: {s}"));
            }
            if let Some(names) = s.strip_prefix("DROP TABLE ") {
                for table in &earlier_tables {
                    if names.split([' ', ',']).any(|t| t == table) {
                        found.push(format!("DROP TABLE of {table}, created earlier: {s}"));
                    }
                }
            }
        }
        if !marked {
            violations.extend(found.into_iter().map(|found| Violation {
                file: file.clone(),
                found,
            }));
        }
        earlier_tables.extend(created_tables(&text));
    }
    violations
}

/// Uppercase, comments stripped, whitespace collapsed, `{schema}.` dropped.
fn normalize(sql: &str) -> String {
    let without_comments: String = sql
        .lines()
        .map(|line| line.split("--").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join(" ");
    without_comments
        .replace("{schema}.", "")
        .to_uppercase()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

fn created_tables(text: &str) -> Vec<String> {
    text.split("CREATE TABLE ")
        .skip(1)
        .filter_map(|rest| {
            let rest = rest.strip_prefix("IF NOT EXISTS ").unwrap_or(rest);
            rest.split([' ', '(']).next().map(str::to_string)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(sqls: &[&str]) -> Vec<(String, String)> {
        sqls.iter()
            .enumerate()
            .map(|(i, sql)| (format!("{:04}_m.sql", i + 1), sql.to_string()))
            .collect()
    }

    #[test]
    fn additive_migrations_pass() {
        let v = check_additive(&files(&[
            "CREATE TABLE {schema}.jobs (id bigint, name text NOT NULL);",
            "-- a comment that says DROP COLUMN is fine\n\
             ALTER TABLE jobs ADD COLUMN fingerprint text;\n\
             ALTER TABLE jobs ADD COLUMN n integer NOT NULL DEFAULT 0;\n\
             CREATE INDEX jobs_n ON jobs (n);\n\
             CREATE TABLE scratch (x int); DROP TABLE scratch;",
        ]));
        assert_eq!(v, vec![]);
    }

    #[test]
    fn dropping_renaming_and_retyping_are_refused() {
        let cases = [
            "ALTER TABLE jobs DROP COLUMN name;",
            "ALTER TABLE jobs RENAME COLUMN name TO title;",
            "ALTER TABLE jobs RENAME TO tasks;",
            "ALTER TABLE jobs ALTER COLUMN id TYPE integer;",
            "ALTER TABLE jobs ALTER COLUMN id SET DATA TYPE integer;",
            "ALTER TABLE jobs ALTER COLUMN name SET NOT NULL;",
            "ALTER TABLE jobs ADD COLUMN owner text NOT NULL;",
            "DROP TABLE {schema}.jobs;",
            "drop table if exists jobs;",
        ];
        for case in cases {
            let v = check_additive(&files(&["CREATE TABLE jobs (id bigint, name text);", case]));
            assert_eq!(v.len(), 1, "{case}: {v:?}");
            assert_eq!(v[0].file, "0002_m.sql");
        }
    }

    #[test]
    fn the_marker_with_a_reason_lets_a_migration_through() {
        let drop = "ALTER TABLE jobs DROP COLUMN name;";
        let marked = format!("{MARKER} no release since 0.3 reads name\n{drop}");
        assert_eq!(
            check_additive(&files(&["CREATE TABLE jobs (name text);", &marked])),
            vec![]
        );
        let bare = format!("{MARKER}\n{drop}");
        assert_eq!(
            check_additive(&files(&["CREATE TABLE jobs (name text);", &bare])).len(),
            1
        );
    }
}

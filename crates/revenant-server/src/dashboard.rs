//! The web dashboard's static files, served at `GET /` and `GET /ui/{*path}`.
//!
//! Plain HTML, CSS and JavaScript modules from `crates/revenant-server/dashboard/`,
//! compiled into the binary: the dashboard works on a machine with no network, and
//! nothing is fetched from outside (no CDN, no web fonts). The page reads the JSON API
//! under `/v1` with the token the user types in (kept in the tab's sessionStorage).
//! docs/dashboard.md describes each view.
//!
//! Files are listed one by one rather than walked at build time: a path that is not in
//! `FILES` is not served, so there is nothing to traverse. The tests below fail when
//! a file in the folder is missing from the list, or when a file refers to anything
//! outside the server.

/// One file of the dashboard folder: its path after `/ui/`, and its bytes.
macro_rules! dashboard_file {
    ($path:literal) => {
        (
            $path,
            include_bytes!(concat!("../dashboard/", $path)) as &[u8],
        )
    };
}

/// Every file of the dashboard.
const FILES: &[(&str, &[u8])] = &[
    dashboard_file!("index.html"),
    dashboard_file!("app.css"),
    dashboard_file!("favicon.svg"),
    dashboard_file!("app.js"),
    dashboard_file!("api.js"),
    dashboard_file!("format.js"),
    dashboard_file!("chart.js"),
    dashboard_file!("views/alerts.js"),
    dashboard_file!("views/dead.js"),
    dashboard_file!("views/dependencies.js"),
    dashboard_file!("views/job.js"),
    dashboard_file!("views/jobs.js"),
    dashboard_file!("views/jobs-table.js"),
    dashboard_file!("views/numbers.js"),
    dashboard_file!("views/overview.js"),
    dashboard_file!("views/queue.js"),
    dashboard_file!("views/schedules.js"),
    dashboard_file!("views/workers.js"),
];

/// The file at `path` (relative to the dashboard's root, `index.html` for `/`) as its
/// content type and bytes, or `None` when there is no such file.
pub fn asset(path: &str) -> Option<(&'static str, &'static [u8])> {
    let (_, bytes) = FILES.iter().find(|(name, _)| *name == path)?;
    Some((content_type(path), bytes))
}

fn content_type(path: &str) -> &'static str {
    match path.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        // Module scripts must be served with a JavaScript type or browsers refuse them.
        Some("js") => "text/javascript; charset=utf-8",
        Some("svg") => "image/svg+xml",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    fn root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("dashboard")
    }

    fn files_on_disk(dir: &Path, prefix: &str, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().into_string().unwrap();
            if entry.file_type().unwrap().is_dir() {
                files_on_disk(&entry.path(), &format!("{prefix}{name}/"), out);
            } else {
                out.push(format!("{prefix}{name}"));
            }
        }
    }

    fn text(path: &str) -> &'static str {
        std::str::from_utf8(asset(path).unwrap().1).unwrap()
    }

    #[test]
    fn every_file_in_the_dashboard_folder_is_served() {
        let mut on_disk = Vec::new();
        files_on_disk(&root(), "", &mut on_disk);
        on_disk.sort();
        let mut listed: Vec<String> = FILES.iter().map(|(name, _)| name.to_string()).collect();
        listed.sort();
        assert_eq!(
            on_disk, listed,
            "the dashboard folder and FILES in dashboard.rs disagree"
        );
    }

    #[test]
    fn index_is_html_and_scripts_are_javascript() {
        assert_eq!(asset("index.html").unwrap().0, "text/html; charset=utf-8");
        assert_eq!(asset("app.js").unwrap().0, "text/javascript; charset=utf-8");
        assert_eq!(asset("app.css").unwrap().0, "text/css; charset=utf-8");
    }

    #[test]
    fn unknown_and_traversing_paths_are_not_served() {
        for path in [
            "",
            "nope.js",
            "../Cargo.toml",
            "views/../app.js",
            "/app.js",
            "dashboard.rs",
        ] {
            assert!(asset(path).is_none(), "{path:?} was served");
        }
    }

    /// Nothing is loaded from another origin: no absolute URL in any file, except the
    /// SVG namespace name (an identifier, never fetched).
    #[test]
    fn the_dashboard_fetches_nothing_from_outside() {
        for (name, bytes) in FILES {
            let body = std::str::from_utf8(bytes).unwrap();
            let cleaned = body.replace("http://www.w3.org/2000/svg", "");
            for needle in [
                "http://",
                "https://",
                "src=\"//",
                "href=\"//",
                "url(//",
                "@import",
            ] {
                assert!(
                    !cleaned.contains(needle),
                    "{name} contains {needle:?}: the dashboard must not load anything from outside"
                );
            }
        }
    }

    /// No inline script, event-handler attribute or style attribute, so the server can
    /// send `Content-Security-Policy: default-src 'self'` and the page still works.
    #[test]
    fn the_dashboard_runs_under_a_strict_content_security_policy() {
        for (name, bytes) in FILES {
            let body = std::str::from_utf8(bytes).unwrap();
            for needle in [
                "style=\"",
                " onclick=",
                " onload=",
                " onerror=",
                "javascript:",
            ] {
                assert!(!body.contains(needle), "{name} contains {needle:?}");
            }
        }
        let index = text("index.html");
        for part in index.split("<script").skip(1) {
            let tag = &part[..part.find('>').unwrap()];
            assert!(tag.contains("src=\""), "index.html has an inline <script>");
        }
    }

    /// Every `ui/...` reference of the page and every module import resolves to a
    /// served file, so a renamed file cannot leave a blank page.
    #[test]
    fn every_reference_between_dashboard_files_resolves() {
        let index = text("index.html");
        for part in index.split("\"ui/").skip(1) {
            let path = &part[..part.find('"').unwrap()];
            assert!(
                asset(path).is_some(),
                "index.html refers to ui/{path}, which is not served"
            );
        }
        for (name, bytes) in FILES.iter().filter(|(n, _)| n.ends_with(".js")) {
            let body = std::str::from_utf8(bytes).unwrap();
            let dir = name.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
            for part in body.split(" from \"").skip(1) {
                let spec = &part[..part.find('"').unwrap()];
                let mut segments: Vec<&str> = if dir.is_empty() {
                    vec![]
                } else {
                    dir.split('/').collect()
                };
                for seg in spec.split('/') {
                    match seg {
                        "." => {}
                        ".." => {
                            assert!(
                                segments.pop().is_some(),
                                "{name}: import {spec:?} leaves the dashboard"
                            );
                        }
                        s => segments.push(s),
                    }
                }
                let target = segments.join("/");
                assert!(
                    asset(&target).is_some(),
                    "{name} imports {spec:?} ({target}), which is not served"
                );
            }
        }
    }
}

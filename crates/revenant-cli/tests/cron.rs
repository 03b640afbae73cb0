//! `revenant cron` as a new user tries it on SQLite: set, list, pause, resume, run by
//! hand, unset; bad input refused by name with exit 2; and a periodic job that fails,
//! retries and dies like any other, its schedule named in `jobs show` and `dead list`.

mod support;

use support::Db;

#[test]
fn bad_schedules_are_refused_by_name_with_exit_2() {
    let db = Db::new();
    let base = ["cron", "set", "x", "--queue", "q", "--kind", "k"];
    fn with<'a>(base: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
        [base, extra].concat()
    }
    db.fails(&with(&base, &["--cron", "61 * * * *"]), 2, "cron");
    db.fails(
        &with(&base, &["--cron", "* * * * *", "--timezone", "Mars/Base"]),
        2,
        "timezone",
    );
    db.fails(&with(&base, &["--every", "0s"]), 2, "every");
    db.fails(
        &with(&base, &["--every", "5s", "--timezone", "Europe/Paris"]),
        2,
        "timezone",
    );
    db.fails(
        &with(&base, &["--every", "5s", "--misfire", "all"]),
        2,
        "misfire",
    );
    db.fails(
        &with(&base, &["--every", "5s", "--payload", "{nope"]),
        2,
        "payload",
    );
    db.fails(
        &with(&base, &["--cron", "* * * * *", "--every", "5s"]),
        2,
        "cannot be used with",
    );
    db.fails(&with(&base, &[]), 2, "--cron");
    db.fails(
        &[
            "cron", "set", "bad name", "--every", "5s", "-q", "q", "-k", "k",
        ],
        2,
        "name",
    );
    assert_eq!(
        db.ok_json(&["cron", "list", "--json"]),
        serde_json::json!([])
    );
    for verb in ["pause", "resume", "run", "unset"] {
        db.fails(&["cron", verb, "nobody"], 1, "no schedule named");
    }
}

#[test]
fn set_list_pause_resume_run_and_unset() {
    let db = Db::new();
    let set = db.ok_json(&[
        "cron",
        "set",
        "nightly",
        "--cron",
        "30 2 * * *",
        "--timezone",
        "America/New_York",
        "--misfire",
        "last",
        "-q",
        "reports",
        "-k",
        "report",
        "--payload",
        r#"{"format":"pdf"}"#,
        "--json",
    ]);
    assert_eq!(set["name"], "nightly");
    assert_eq!(set["misfire"], "last");
    assert!(set["next_tick"].is_string(), "{set}");
    let listed = db.ok_json(&["cron", "list", "--json"]);
    let row = &listed[0];
    for field in [
        "next_tick",
        "last_tick",
        "paused",
        "misfire",
        "grace",
        "rule",
    ] {
        assert!(row.get(field).is_some(), "{field} in {row}");
    }
    assert_eq!(row["paused"], false);
    assert_eq!(row["last_tick"], serde_json::Value::Null);
    assert_eq!(row["spec"]["job"]["payload"]["format"], "pdf");
    let text = db.ok(&["cron", "list"]);
    assert!(
        text.contains("nightly") && text.contains("America/New_York"),
        "{text}"
    );

    db.ok(&["cron", "pause", "nightly"]);
    assert_eq!(db.ok_json(&["cron", "list", "--json"])[0]["paused"], true);
    let run = db.ok_json(&["cron", "run", "nightly", "--json"]);
    let id = run["job"]["id"].to_string();
    let job = db.ok_json(&["jobs", "show", &id, "--json"]);
    assert_eq!(job["schedule"], "nightly", "{job}");
    assert_eq!(job["queue"], "reports");
    let shown = db.ok(&["jobs", "show", &id]);
    assert!(
        shown.contains("schedule      nightly, run by hand"),
        "{shown}"
    );
    db.ok(&["cron", "resume", "nightly"]);
    assert_eq!(db.ok_json(&["cron", "list", "--json"])[0]["paused"], false);
    db.ok(&["cron", "unset", "nightly"]);
    assert_eq!(
        db.ok_json(&["cron", "list", "--json"]),
        serde_json::json!([])
    );
}

#[test]
fn a_periodic_job_retries_and_dies_like_any_other_naming_its_schedule() {
    let db = Db::new();
    db.ok(&[
        "policy",
        "set",
        "--queue",
        "q",
        "--attempts",
        "2",
        "--base",
        "100ms",
        "--cap",
        "200ms",
    ]);
    // Port 9 on loopback refuses the connection: a transient failure, retried.
    db.ok(&[
        "cron",
        "set",
        "refused",
        "--every",
        "1s",
        "-q",
        "q",
        "-k",
        "http",
        "--payload",
        r#"{"url":"http://127.0.0.1:9/"}"#,
    ]);
    let _worker = db.loopback_worker();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let dead = loop {
        let dead = db.ok_json(&["dead", "list", "--json"]);
        if let Some(job) = dead.as_array().and_then(|jobs| jobs.first()) {
            break job.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no periodic job died within 60 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(dead["schedule"], "refused", "{dead}");
    assert_eq!(dead["attempts"], 2, "{dead}");
    assert_eq!(dead["dead_reason"], "attempts_exhausted", "{dead}");
    let table = db.ok(&["dead", "list"]);
    assert!(
        table.contains("SCHEDULE") && table.contains("refused"),
        "{table}"
    );
    let id = dead["id"].to_string();
    let shown = db.ok(&["jobs", "show", &id]);
    assert!(shown.contains("schedule      refused, tick "), "{shown}");
}

//! Stored retry policies from the command line, as a new user tries them: a policy set
//! once for a queue decides a job's attempts at enqueue and its backoff in the worker,
//! and the worker has no flag that could silently disagree.

use serde_json::Value;

mod support;

use support::Db;

#[test]
fn a_stored_queue_policy_gives_three_attempts_and_dead_at_three() {
    let db = Db::new();
    let stored = db.ok_json(&[
        "policy",
        "set",
        "--queue",
        "q",
        "--attempts",
        "3",
        "--base",
        "100ms",
        "--cap",
        "200ms",
        "--json",
    ]);
    assert_eq!(
        stored["scope"],
        serde_json::json!({"scope": "queue", "name": "q"})
    );
    assert_eq!(stored["policy"]["max_attempts"], 3);

    // Port 9 (discard) on loopback: refused at once, a transient failure each time.
    let enqueued = db.ok_json(&[
        "enqueue",
        "--queue",
        "q",
        "--kind",
        "http",
        "--payload",
        r#"{"url":"http://127.0.0.1:9/x"}"#,
        "--json",
    ]);
    assert_eq!(
        enqueued["max_attempts"], 3,
        "resolved at enqueue: {enqueued}"
    );
    let id = enqueued["id"].to_string();

    let _worker = db.loopback_worker();
    let job = db.wait_finished(&id);
    assert_eq!(job["status"], "dead", "{job}");
    assert_eq!(job["dead_reason"], "attempts_exhausted", "{job}");
    assert_eq!(job["attempts"], 3, "{job}");
    assert_eq!(job["max_attempts"], 3, "{job}");
    let errors = job["errors"].as_array().expect("the error history");
    assert_eq!(errors.len(), 3, "one entry per attempt: {job}");
}

#[test]
fn a_kind_policy_wins_over_its_queue_and_an_explicit_max_attempts_wins_over_both() {
    let db = Db::new();
    db.ok(&["policy", "set", "--queue", "q", "--attempts", "3"]);
    db.ok(&["policy", "set", "--kind", "webhook", "--attempts", "7"]);
    let enqueue = |kind: &str, extra: &[&str]| {
        let mut args = vec!["enqueue", "--queue", "q", "--kind", kind, "--json"];
        args.extend_from_slice(extra);
        db.ok_json(&args)["max_attempts"].clone()
    };
    assert_eq!(enqueue("webhook", &[]), 7);
    assert_eq!(enqueue("receipt", &[]), 3);
    assert_eq!(enqueue("webhook", &["--max-attempts", "2"]), 2);

    let listed = db.ok_json(&["policy", "list", "--json"]);
    let scopes: Vec<&Value> = listed["stored"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["scope"])
        .collect();
    assert_eq!(
        scopes,
        [
            &serde_json::json!({"scope": "queue", "name": "q"}),
            &serde_json::json!({"scope": "kind", "name": "webhook"}),
        ]
    );
    assert_eq!(listed["default"]["max_attempts"], 12);

    // Unset falls back to the queue's policy; unsetting nothing says so.
    assert!(db
        .ok(&["policy", "unset", "--kind", "webhook"])
        .contains("removed"));
    assert_eq!(enqueue("webhook", &[]), 3);
    assert!(db
        .ok(&["policy", "unset", "--kind", "webhook"])
        .contains("nothing changed"));
}

#[test]
fn set_keeps_the_scopes_other_stored_values() {
    let db = Db::new();
    db.ok(&[
        "policy",
        "set",
        "--default",
        "--attempts",
        "4",
        "--base",
        "1s",
    ]);
    let stored = db.ok_json(&["policy", "set", "--default", "--cap", "5s", "--json"]);
    assert_eq!(stored["policy"]["max_attempts"], 4, "{stored}");
    assert_eq!(stored["policy"]["backoff"]["base"], "1s", "{stored}");
    assert_eq!(stored["policy"]["backoff"]["cap"], "5s", "{stored}");
}

#[test]
fn policy_flags_that_cannot_take_effect_do_not_exist_on_the_worker() {
    let db = Db::new();
    for flag in [
        "--attempts",
        "--base",
        "--cap",
        "--multiplier",
        "--jitter",
        "--lease",
    ] {
        db.fails(&["work", "-q", "q", flag, "3"], 2, flag);
    }
}

#[test]
fn policy_set_refuses_bad_input_by_name_and_stores_nothing() {
    let db = Db::new();
    db.fails(
        &["policy", "set", "--queue", "q", "--attempts", "0"],
        2,
        "attempts",
    );
    db.fails(
        &["policy", "set", "--queue", "q", "--attempts", "-1"],
        2,
        "attempts",
    );
    db.fails(
        &[
            "policy", "set", "--queue", "q", "--base", "1h", "--cap", "1s",
        ],
        2,
        "cap",
    );
    db.fails(
        &["policy", "set", "--queue", "q", "--jitter", "wobbly"],
        2,
        "jitter",
    );
    db.fails(
        &[
            "policy",
            "set",
            "--queue",
            "q",
            "--attempt-timeout",
            "2m",
            "--lease",
            "1m",
        ],
        2,
        "attempt_timeout",
    );
    db.fails(&["policy", "set", "--queue", "bad name!"], 2, "queue");
    // A scope is required, and only one.
    db.fails(&["policy", "set", "--attempts", "3"], 2, "--default");
    db.fails(
        &[
            "policy",
            "set",
            "--default",
            "--queue",
            "q",
            "--attempts",
            "3",
        ],
        2,
        "cannot be used with",
    );
    let listed = db.ok_json(&["policy", "list", "--json"]);
    assert_eq!(listed["stored"], serde_json::json!([]));
}

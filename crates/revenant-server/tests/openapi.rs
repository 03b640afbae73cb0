//! `openapi.json` and the router agree: the same paths and methods, each operation's
//! `x-revenant-scope` is the scope the router checks, and every `$ref` resolves. The
//! schemas of answers served straight from the core's types match those types, every
//! field and every null included.

use std::collections::BTreeSet;

use revenant::dependency::{
    Answers, BreakerState, BudgetState, BulkheadState, DependencyState, ProbeView, RateState,
    WaitingCounts,
};
use revenant_server::{OPENAPI_JSON, ROUTES};
use serde_json::Value;

fn document() -> Value {
    serde_json::from_str(OPENAPI_JSON).expect("openapi.json is JSON")
}

#[test]
fn the_document_lists_exactly_the_routers_routes_and_scopes() {
    let doc = document();
    let mut in_document = BTreeSet::new();
    for (path, operations) in doc["paths"].as_object().expect("paths") {
        for (method, operation) in operations.as_object().expect("operations") {
            let scope = operation["x-revenant-scope"]
                .as_str()
                .unwrap_or_else(|| panic!("{method} {path} has no x-revenant-scope"))
                .to_string();
            in_document.insert((method.clone(), path.clone(), scope));
        }
    }
    let in_router: BTreeSet<(String, String, String)> = ROUTES
        .iter()
        .map(|route| {
            (
                route.method.as_str().to_string(),
                route.path.to_string(),
                route
                    .scope
                    .map_or("none".to_string(), |s| s.as_str().to_string()),
            )
        })
        .collect();
    let missing: Vec<_> = in_router.difference(&in_document).collect();
    let extra: Vec<_> = in_document.difference(&in_router).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "routes not in openapi.json (or with another scope): {missing:?}\n\
         in openapi.json but not routed (or with another scope): {extra:?}"
    );
}

#[test]
fn open_routes_say_so_and_the_rest_need_the_bearer_scheme() {
    let doc = document();
    assert_eq!(doc["security"], serde_json::json!([{"bearer": []}]));
    for route in ROUTES {
        let operation = &doc["paths"][route.path][route.method.as_str()];
        match route.scope {
            None => assert_eq!(operation["security"], serde_json::json!([]), "{route:?}"),
            Some(_) => assert!(
                operation.get("security").is_none(),
                "{route:?} inherits bearer"
            ),
        }
    }
}

#[test]
fn every_reference_resolves_and_every_schema_is_used() {
    let doc = document();
    let mut used = BTreeSet::new();
    collect_refs(&doc, &mut used);
    for reference in &used {
        let (kind, name) = reference
            .strip_prefix("#/components/")
            .and_then(|rest| rest.split_once('/'))
            .unwrap_or_else(|| panic!("unexpected $ref {reference}"));
        assert!(
            matches!(kind, "schemas" | "responses"),
            "unexpected $ref {reference}"
        );
        assert!(
            doc["components"][kind].get(name).is_some(),
            "{reference} does not resolve"
        );
    }
    for kind in ["schemas", "responses"] {
        let defined = doc["components"][kind].as_object().expect(kind);
        for name in defined.keys() {
            assert!(
                used.contains(&format!("#/components/{kind}/{name}")),
                "{kind} {name} is never used"
            );
        }
    }
}

#[test]
fn error_codes_in_the_document_are_the_servers() {
    let doc = document();
    let listed: Vec<String> = doc["components"]["schemas"]["Error"]["properties"]["error"]
        ["properties"]["code"]["enum"]
        .as_array()
        .expect("codes")
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect();
    use revenant_server::ErrorCode::*;
    let codes = [
        InvalidJson,
        InvalidField,
        UnsupportedMediaType,
        PayloadTooLarge,
        BadRequest,
        HeadersTooLarge,
        MisdirectedRequest,
        Unauthorized,
        Forbidden,
        NotFound,
        MethodNotAllowed,
        LeaseLost,
        Conflict,
        StoreUnavailable,
        StoreError,
    ];
    let ours: Vec<String> = codes.iter().map(|c| c.as_str().to_string()).collect();
    assert_eq!(listed, ours);
}

fn collect_refs(value: &Value, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(reference)) = map.get("$ref") {
                out.insert(reference.clone());
            }
            map.values().for_each(|v| collect_refs(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| collect_refs(v, out)),
        _ => {}
    }
}

/// Checks `value` against `schema` for the subset of OpenAPI 3.0 the document uses
/// (`type`, `nullable`, `enum`, `properties`, `required`, `additionalProperties:
/// false`, `items`, `$ref`, a one-item `allOf`); returns the first mismatch's path.
fn conforms(doc: &Value, schema: &Value, value: &Value, path: &str) -> Result<(), String> {
    if let Some(reference) = schema["$ref"].as_str() {
        let name = reference.trim_start_matches("#/components/schemas/");
        return conforms(doc, &doc["components"]["schemas"][name], value, path);
    }
    if value.is_null() {
        return if schema["nullable"] == Value::Bool(true) {
            Ok(())
        } else {
            Err(format!("{path} is null but not nullable"))
        };
    }
    if let Some(all) = schema["allOf"].as_array() {
        for part in all {
            conforms(doc, part, value, path)?;
        }
        return Ok(());
    }
    if let Some(choices) = schema["enum"].as_array() {
        if !choices.contains(value) {
            return Err(format!("{path} = {value} is not one of {choices:?}"));
        }
    }
    let fits = match schema["type"].as_str() {
        Some("object") => value.is_object(),
        Some("array") => value.is_array(),
        Some("string") => value.is_string(),
        Some("number") => value.is_number(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("boolean") => value.is_boolean(),
        _ => true,
    };
    if !fits {
        return Err(format!("{path} = {value} is not a {}", schema["type"]));
    }
    if let Some(object) = value.as_object() {
        let properties = schema["properties"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        for required in schema["required"].as_array().into_iter().flatten() {
            let name = required.as_str().unwrap();
            if !object.contains_key(name) {
                return Err(format!("{path}.{name} is required but missing"));
            }
        }
        for (name, field) in object {
            match properties.get(name) {
                Some(field_schema) => {
                    conforms(doc, field_schema, field, &format!("{path}.{name}"))?
                }
                None if schema["additionalProperties"] == Value::Bool(false) => {
                    return Err(format!("{path}.{name} is not in the schema"))
                }
                None => {}
            }
        }
    }
    if let (Some(items), Some(values)) = (schema.get("items"), value.as_array()) {
        for (i, item) in values.iter().enumerate() {
            conforms(doc, items, item, &format!("{path}[{i}]"))?;
        }
    }
    Ok(())
}

/// Every field of the core's `DependencyState` is in the `Dependency` schema, and the
/// schema asks for nothing the type does not send: with every optional part present
/// and with every one absent.
#[test]
fn the_dependency_schema_is_the_cores_dependency_state() {
    let doc = document();
    let at = chrono::DateTime::parse_from_rfc3339("2026-12-01T08:00:03.120Z")
        .unwrap()
        .to_utc();
    let full = DependencyState {
        dependency: "email-provider".into(),
        breaker: BreakerState::HalfOpen,
        held_open: false,
        opened_at: Some(at),
        probe_at: Some(at),
        cooldown_secs: 5.0,
        probe: Some(ProbeView {
            job_id: 42,
            worker: "host-1:123".into(),
            expires_at: Some(at),
        }),
        answers: Answers {
            window_secs: 10.0,
            successes: 3.5,
            failures: 12.0,
            failure_share: 0.77,
            threshold: 0.5,
            min_requests: 10,
            slow: 2.0,
            slow_share: 0.11,
            slow_threshold: Some(0.5),
            slow_call_secs: Some(5.0),
        },
        trips: 3,
        changed_at: Some(at),
        rate_limit: Some(RateState {
            per_second: 45.0,
            burst: 5,
            tokens: 2.5,
            next_turn_at: Some(at),
            booked_secs: 1.25,
        }),
        retry_budget: Some(BudgetState {
            ratio: 0.2,
            min_retries: 10,
            window_secs: 10.0,
            fresh: 40.0,
            retries: 3.0,
            allowed: 10.0,
        }),
        bulkhead: Some(BulkheadState {
            in_flight: 4,
            shared_limit: Some(8),
            per_worker_limit: Some(3),
            per_worker_share: 0.5,
            adaptive: true,
            turned_back: 12,
        }),
        waiting: WaitingCounts {
            breaker: 40,
            rate_limit: 2,
            retry_budget: 1,
        },
    };
    let bare = DependencyState {
        breaker: BreakerState::Closed,
        opened_at: None,
        probe_at: None,
        probe: Some(ProbeView {
            expires_at: None,
            ..full.probe.clone().unwrap()
        }),
        changed_at: None,
        rate_limit: Some(RateState {
            next_turn_at: None,
            ..full.rate_limit.unwrap()
        }),
        bulkhead: Some(BulkheadState {
            shared_limit: None,
            per_worker_limit: None,
            ..full.bulkhead.unwrap()
        }),
        answers: Answers {
            slow_threshold: None,
            slow_call_secs: None,
            ..full.answers
        },
        ..full.clone()
    };
    let none = DependencyState {
        probe: None,
        rate_limit: None,
        retry_budget: None,
        bulkhead: None,
        ..bare.clone()
    };
    let schema = serde_json::json!({"$ref": "#/components/schemas/Dependency"});
    for state in [&full, &bare, &none] {
        let value = serde_json::to_value(state).unwrap();
        conforms(&doc, &schema, &value, "Dependency").unwrap_or_else(|e| panic!("{e}\n{value}"));
    }
    // Every property the schema lists is sent (none is documented but never there).
    let sent = serde_json::to_value(&full).unwrap();
    let listed = doc["components"]["schemas"]["Dependency"]["properties"]
        .as_object()
        .unwrap();
    let sent_keys: BTreeSet<&String> = sent.as_object().unwrap().keys().collect();
    let listed_keys: BTreeSet<&String> = listed.keys().collect();
    assert_eq!(sent_keys, listed_keys);
    let list = serde_json::json!({"dependencies": [sent]});
    conforms(
        &doc,
        &serde_json::json!({"$ref": "#/components/schemas/DependencyList"}),
        &list,
        "DependencyList",
    )
    .unwrap();
    // And the checker does catch a mismatch.
    let mut wrong = serde_json::to_value(&none).unwrap();
    wrong["answers"]["extra"] = Value::Bool(true);
    assert!(conforms(&doc, &schema, &wrong, "Dependency").is_err());
    wrong = serde_json::to_value(&none).unwrap();
    wrong["trips"] = Value::Null;
    assert!(conforms(&doc, &schema, &wrong, "Dependency").is_err());
}

/// The `RetryPolicy` schema is the core's `RetryPolicy` as serde writes it (what
/// `GET /v1/policies` sends and `PUT /v1/policies/{scope}` reads), with every jitter.
#[test]
fn the_retry_policy_schema_is_the_cores_retry_policy() {
    use revenant::{Jitter, RetryPolicy};
    let doc = document();
    let schema = serde_json::json!({"$ref": "#/components/schemas/RetryPolicy"});
    for jitter in [
        Jitter::None,
        Jitter::Full,
        Jitter::Equal,
        Jitter::Proportional(0.5),
        Jitter::Decorrelated,
    ] {
        let policy = RetryPolicy::builder().jitter(jitter).build().unwrap();
        let value = serde_json::to_value(policy).unwrap();
        conforms(&doc, &schema, &value, "RetryPolicy").unwrap_or_else(|e| panic!("{e}\n{value}"));
    }
    let sent = serde_json::to_value(RetryPolicy::default()).unwrap();
    let sent_keys: BTreeSet<&String> = sent.as_object().unwrap().keys().collect();
    let listed = &doc["components"]["schemas"]["RetryPolicy"]["properties"];
    let listed_keys: BTreeSet<&String> = listed.as_object().unwrap().keys().collect();
    assert_eq!(sent_keys, listed_keys);
    let list = serde_json::json!({
        "stored": [{"scope": "queue:emails", "policy": sent, "updated_at": "2026-12-01T08:00:00Z"}],
        "default": sent,
    });
    conforms(
        &doc,
        &serde_json::json!({"$ref": "#/components/schemas/PolicyList"}),
        &list,
        "PolicyList",
    )
    .unwrap();
    let mut wrong = sent.clone();
    wrong["backoff"]["extra"] = Value::Bool(true);
    assert!(conforms(&doc, &schema, &wrong, "RetryPolicy").is_err());
}

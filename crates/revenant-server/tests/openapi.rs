//! `openapi.json` and the router agree: the same paths and methods, each operation's
//! `x-revenant-scope` is the scope the router checks, and every `$ref` resolves.

use std::collections::BTreeSet;

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
    let schemas = doc["components"]["schemas"].as_object().expect("schemas");
    let mut used = BTreeSet::new();
    collect_refs(&doc, &mut used);
    for reference in &used {
        let name = reference
            .strip_prefix("#/components/schemas/")
            .unwrap_or_else(|| panic!("unexpected $ref {reference}"));
        assert!(schemas.contains_key(name), "{reference} does not resolve");
    }
    for name in schemas.keys() {
        assert!(
            used.contains(&format!("#/components/schemas/{name}")),
            "schema {name} is never used"
        );
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

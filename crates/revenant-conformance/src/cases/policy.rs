//! Stored retry policies: `policy_set`, `policy_list` and `policy_delete`, the one copy
//! every worker, the CLI and the server read.

use revenant_core::RetryPolicy;

use super::prelude::*;

fn policy(max_attempts: u32) -> RetryPolicy {
    RetryPolicy::builder()
        .max_attempts(max_attempts)
        .build()
        .expect("a workable policy")
}

async fn set(store: &Arc<dyn Store>, scope: PolicyScope, policy: RetryPolicy, now: Timestamp) {
    store
        .policy_set(PolicySetParams {
            scope,
            policy,
            now: Some(now),
        })
        .await
        .expect("policy_set");
}

async fn list(store: &Arc<dyn Store>) -> Vec<PolicyRecord> {
    store.policy_list().await.expect("policy_list")
}

/// A policy set for each kind of scope comes back from the list as it was set, with
/// the time it was set.
pub async fn policy_set_stores_a_policy_that_policy_list_returns(store: Arc<dyn Store>) {
    assert_eq!(list(&store).await, vec![], "a fresh store has no policies");
    set(&store, PolicyScope::Default, policy(7), at(1)).await;
    set(
        &store,
        PolicyScope::Queue("emails".into()),
        policy(5),
        at(2),
    )
    .await;
    set(
        &store,
        PolicyScope::Kind("webhook".into()),
        policy(2),
        at(3),
    )
    .await;
    assert_eq!(
        list(&store).await,
        vec![
            PolicyRecord {
                scope: PolicyScope::Default,
                policy: policy(7),
                updated_at: at(1),
            },
            PolicyRecord {
                scope: PolicyScope::Queue("emails".into()),
                policy: policy(5),
                updated_at: at(2),
            },
            PolicyRecord {
                scope: PolicyScope::Kind("webhook".into()),
                policy: policy(2),
                updated_at: at(3),
            },
        ]
    );
}

/// Setting a scope's policy again replaces it (one record, the new policy and time);
/// the other scopes are untouched.
pub async fn policy_set_overwrites_the_scopes_policy(store: Arc<dyn Store>) {
    set(
        &store,
        PolicyScope::Queue("emails".into()),
        policy(5),
        at(1),
    )
    .await;
    set(&store, PolicyScope::Queue("other".into()), policy(4), at(1)).await;
    set(
        &store,
        PolicyScope::Queue("emails".into()),
        policy(9),
        at(60),
    )
    .await;
    let records = list(&store).await;
    assert_eq!(records.len(), 2, "{records:?}");
    assert_eq!(records[0].scope, PolicyScope::Queue("emails".into()));
    assert_eq!(records[0].policy.max_attempts(), 9);
    assert_eq!(records[0].updated_at, at(60));
    assert_eq!(records[1].policy.max_attempts(), 4);
    assert_eq!(records[1].updated_at, at(1));
}

/// Delete removes only its scope and says whether a policy went; a queue and a kind
/// of the same name are different scopes.
pub async fn policy_delete_removes_only_its_scope_and_says_whether_it_did(store: Arc<dyn Store>) {
    set(&store, PolicyScope::Default, policy(7), at(1)).await;
    set(
        &store,
        PolicyScope::Queue("emails".into()),
        policy(5),
        at(1),
    )
    .await;
    set(&store, PolicyScope::Kind("emails".into()), policy(2), at(1)).await;
    let deleted = store
        .policy_delete(PolicyDeleteParams {
            scope: PolicyScope::Queue("emails".into()),
        })
        .await
        .expect("policy_delete");
    assert!(deleted, "a stored policy was deleted");
    let again = store
        .policy_delete(PolicyDeleteParams {
            scope: PolicyScope::Queue("emails".into()),
        })
        .await
        .expect("policy_delete");
    assert!(!again, "nothing left to delete");
    let scopes: Vec<PolicyScope> = list(&store).await.into_iter().map(|r| r.scope).collect();
    assert_eq!(
        scopes,
        vec![PolicyScope::Default, PolicyScope::Kind("emails".into())]
    );
    assert!(store
        .policy_delete(PolicyDeleteParams {
            scope: PolicyScope::Default,
        })
        .await
        .expect("policy_delete"));
    assert_eq!(list(&store).await.len(), 1);
}

/// The list gives the default first, then queues by name, then kinds by name (byte
/// order: upper case before lower case), whatever order they were set in.
pub async fn policy_list_orders_default_then_queues_then_kinds_by_name(store: Arc<dyn Store>) {
    for scope in [
        PolicyScope::Kind("b".into()),
        PolicyScope::Queue("b".into()),
        PolicyScope::Kind("a".into()),
        PolicyScope::Queue("a-2".into()),
        PolicyScope::Default,
        PolicyScope::Queue("Z".into()),
        PolicyScope::Queue("a".into()),
        PolicyScope::Queue("a_2".into()),
    ] {
        set(&store, scope, policy(3), at(1)).await;
    }
    let scopes: Vec<PolicyScope> = list(&store).await.into_iter().map(|r| r.scope).collect();
    assert_eq!(
        scopes,
        vec![
            PolicyScope::Default,
            PolicyScope::Queue("Z".into()),
            PolicyScope::Queue("a".into()),
            PolicyScope::Queue("a-2".into()),
            PolicyScope::Queue("a_2".into()),
            PolicyScope::Queue("b".into()),
            PolicyScope::Kind("a".into()),
            PolicyScope::Kind("b".into()),
        ]
    );
}

/// A scope whose name is not a valid queue or kind name is refused with that field
/// named, and nothing is stored; delete refuses it too.
pub async fn policy_set_refuses_an_invalid_scope_name_and_names_the_field(store: Arc<dyn Store>) {
    for (scope, field) in [
        (PolicyScope::Queue("with space".into()), "queue"),
        (PolicyScope::Queue(String::new()), "queue"),
        (PolicyScope::Kind("semi;colon".into()), "kind"),
        (PolicyScope::Kind("k".repeat(65)), "kind"),
    ] {
        let result = store
            .policy_set(PolicySetParams {
                scope: scope.clone(),
                policy: policy(3),
                now: Some(at(1)),
            })
            .await;
        match result {
            Err(StoreError::Input(err)) => assert_eq!(err.field, field, "for {scope:?}"),
            other => panic!("expected an input error on {field} for {scope:?}, got {other:?}"),
        }
        let deleted = store.policy_delete(PolicyDeleteParams { scope }).await;
        assert!(
            matches!(deleted, Err(StoreError::Input(ref err)) if err.field == field),
            "{deleted:?}"
        );
    }
    assert_eq!(list(&store).await, vec![], "nothing was stored");
}

/// A policy that cannot work (here an attempt timeout not below the lease, which only
/// a deserialized policy can carry past the builder) is refused with the field at
/// fault, and nothing is stored.
pub async fn policy_set_refuses_an_unworkable_policy(store: Arc<dyn Store>) {
    let mut json = serde_json::to_value(RetryPolicy::default()).expect("policy to JSON");
    json["attempt_timeout"] = json["lease"].clone();
    let unworkable: RetryPolicy = serde_json::from_value(json).expect("a policy from JSON");
    let result = store
        .policy_set(PolicySetParams {
            scope: PolicyScope::Queue("emails".into()),
            policy: unworkable,
            now: Some(at(1)),
        })
        .await;
    assert!(
        matches!(result, Err(StoreError::Input(ref err)) if err.field == "attempt_timeout"),
        "{result:?}"
    );
    assert_eq!(list(&store).await, vec![], "nothing was stored");
}

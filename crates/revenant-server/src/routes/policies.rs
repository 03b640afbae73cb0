//! The stored retry policies: list them with the default in effect, store one for a
//! scope, remove one. Scopes are `default`, `queue:NAME` and `kind:NAME`; the most
//! specific wins (a kind's, else its queue's, else the default). What these routes
//! store is what every producer, worker and this server resolve: at once in this
//! server, within a few seconds in other processes (`revenant::Client::set_policy`).

use axum::extract::{FromRequestParts, RawPathParams, State};
use axum::http::request::Parts;
use axum::Json;
use revenant::store::PolicyRecord;
use revenant::{names, PolicyScope, RetryPolicy, Timestamp};
use serde::Serialize;

use crate::error::ApiError;
use crate::extract::{JsonBody, NoBody};
use crate::state::AppState;

/// The `{scope}` of a policy route: `default`, `queue:NAME` or `kind:NAME`.
#[derive(Debug, Clone)]
pub struct ScopePath(pub PolicyScope);

impl<S: Send + Sync> FromRequestParts<S> for ScopePath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let params = RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(|rejection| ApiError::field("scope", rejection.body_text()))?;
        let text = params
            .iter()
            .find(|(name, _)| *name == "scope")
            .map(|(_, value)| value.to_string())
            .ok_or_else(|| ApiError::field("scope", "is missing from the path"))?;
        parse_scope(&text).map(ScopePath)
    }
}

fn parse_scope(text: &str) -> Result<PolicyScope, ApiError> {
    let scope = match text.split_once(':') {
        None if text == "default" => return Ok(PolicyScope::Default),
        Some(("queue", name)) => PolicyScope::Queue(name.to_string()),
        Some(("kind", name)) => PolicyScope::Kind(name.to_string()),
        _ => {
            return Err(ApiError::field(
                "scope",
                format!("{text:?} is not a scope; use default, queue:NAME or kind:NAME"),
            ))
        }
    };
    match &scope {
        PolicyScope::Queue(name) | PolicyScope::Kind(name) => names::validate_name("scope", name)?,
        PolicyScope::Default => {}
    }
    Ok(scope)
}

/// A scope as the routes write it: `default`, `queue:NAME`, `kind:NAME`.
fn scope_text(scope: &PolicyScope) -> String {
    match scope {
        PolicyScope::Default => "default".to_string(),
        PolicyScope::Queue(name) => format!("queue:{name}"),
        PolicyScope::Kind(name) => format!("kind:{name}"),
    }
}

/// One stored policy.
#[derive(Debug, Serialize)]
pub struct PolicyView {
    scope: String,
    policy: RetryPolicy,
    #[serde(skip_serializing_if = "Option::is_none")]
    updated_at: Option<Timestamp>,
}

impl From<PolicyRecord> for PolicyView {
    fn from(record: PolicyRecord) -> Self {
        PolicyView {
            scope: scope_text(&record.scope),
            policy: record.policy,
            updated_at: Some(record.updated_at),
        }
    }
}

/// The answer to `GET /v1/policies`.
#[derive(Debug, Serialize)]
pub struct PolicyList {
    /// What the database holds, default first, then queues and kinds by name.
    stored: Vec<PolicyView>,
    /// The policy of a job whose queue and kind have none: the stored default, else
    /// revenant's.
    default: RetryPolicy,
}

/// `GET /v1/policies`: the stored policies and the default in effect.
pub async fn list(State(state): State<AppState>) -> Result<Json<PolicyList>, ApiError> {
    let stored = state.client.stored_policies().await?;
    let effective = state.client.effective_policies().await?;
    Ok(Json(PolicyList {
        stored: stored.into_iter().map(PolicyView::from).collect(),
        default: effective.default,
    }))
}

/// `PUT /v1/policies/{scope}`: stores the body (a retry policy, every field given) for
/// the scope, replacing the one there. A policy that cannot work is refused naming the
/// field. Jobs already enqueued keep their attempt budget; their backoff follows the
/// new policy at their next failure.
pub async fn set(
    State(state): State<AppState>,
    ScopePath(scope): ScopePath,
    JsonBody(policy): JsonBody<RetryPolicy>,
) -> Result<Json<PolicyView>, ApiError> {
    // serde reads the fields as they are; the builder is where a policy is checked.
    let policy = policy.to_builder().build()?;
    state.client.set_policy(scope.clone(), policy).await?;
    Ok(Json(PolicyView {
        scope: scope_text(&scope),
        policy,
        updated_at: None,
    }))
}

/// The answer to `DELETE /v1/policies/{scope}`.
#[derive(Debug, Serialize)]
pub struct PolicyRemoved {
    scope: String,
    removed: bool,
}

/// `DELETE /v1/policies/{scope}`: removes the scope's stored policy; the next most
/// specific one applies. 404 when none was stored.
pub async fn remove(
    State(state): State<AppState>,
    ScopePath(scope): ScopePath,
    _: NoBody,
) -> Result<Json<PolicyRemoved>, ApiError> {
    let text = scope_text(&scope);
    if !state.client.delete_policy(scope).await? {
        return Err(ApiError::not_found(format!(
            "no policy is stored for {text}"
        )));
    }
    Ok(Json(PolicyRemoved {
        scope: text,
        removed: true,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_read_default_queues_and_kinds_and_refuse_the_rest() {
        assert_eq!(parse_scope("default").unwrap(), PolicyScope::Default);
        assert_eq!(
            parse_scope("queue:emails").unwrap(),
            PolicyScope::Queue("emails".into())
        );
        assert_eq!(
            parse_scope("kind:send_receipt").unwrap(),
            PolicyScope::Kind("send_receipt".into())
        );
        for bad in [
            "",
            "Default",
            "queue",
            "queue:",
            "team:emails",
            "default:x",
            "kind:a b",
        ] {
            let err = parse_scope(bad).unwrap_err();
            assert_eq!(err.field.as_deref(), Some("scope"), "{bad}: {err}");
        }
        for scope in ["default", "queue:emails", "kind:send_receipt"] {
            assert_eq!(scope_text(&parse_scope(scope).unwrap()), scope);
        }
    }
}

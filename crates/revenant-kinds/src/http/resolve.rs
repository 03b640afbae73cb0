//! The `http` kind's DNS resolver: the system's (tokio's `lookup_host`), with the
//! outbound policy applied to every answer, so the check is made on the addresses the
//! client then connects to, not on a lookup of its own that could differ.

use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use super::outbound::OutboundPolicy;

/// Resolves host names and drops the addresses the policy refuses; fails with
/// [`DestinationRefused`](super::DestinationRefused) when none is left.
#[derive(Debug, Clone)]
pub(crate) struct PolicyResolver {
    policy: Arc<OutboundPolicy>,
}

impl PolicyResolver {
    pub(crate) fn new(policy: Arc<OutboundPolicy>) -> Self {
        PolicyResolver { policy }
    }
}

impl Resolve for PolicyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = Arc::clone(&self.policy);
        let host = name.as_str().to_string();
        Box::pin(async move {
            // Port 0: the connector sets the URL's port on each address it gets.
            let found = tokio::net::lookup_host((host.as_str(), 0)).await?;
            let kept = policy.filter(&host, found)?;
            Ok(Box::new(kept.into_iter()) as Addrs)
        })
    }
}

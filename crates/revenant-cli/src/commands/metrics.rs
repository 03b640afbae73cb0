//! Prometheus metrics: the exporter `revenant work --metrics-addr` serves, and
//! `revenant metrics`, which prints the queue and dependency gauges computed from the
//! store now (for node_exporter's textfile collector, or a look by hand).
//!
//! The runtime records through the `metrics` facade (see
//! `revenant::runtime::metrics` for every name); this module installs the Prometheus
//! exporter behind it and serves `GET /metrics`.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use axum::http::header;
use axum::routing::get;
use axum::Router;
use clap::Args;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use revenant::runtime::metrics as names;
use revenant::store::{DependencyListParams, QueueStatsParams};
use revenant::{InputError, Store};

use crate::error::CliError;

/// `revenant metrics`: the queue gauges, once, in Prometheus text format.
#[derive(Debug, Args)]
pub struct MetricsArgs {
    /// A worker seen within this long counts as alive (as in `revenant stats`).
    #[arg(long, default_value = "30s")]
    pub alive_within: String,
}

/// The Prometheus text format's content type.
const EXPOSITION: &str = "text/plain; version=0.0.4; charset=utf-8";

fn builder() -> PrometheusBuilder {
    let buckets = |builder: PrometheusBuilder, name: &str, bounds: &[f64]| {
        builder
            .set_buckets_for_metric(Matcher::Full(name.to_string()), bounds)
            .expect("bucket bounds are not empty")
    };
    let builder = buckets(
        PrometheusBuilder::new(),
        names::JOB_RUN_SECONDS,
        names::RUN_SECONDS_BUCKETS,
    );
    buckets(
        builder,
        names::JOB_WAIT_SECONDS,
        names::WAIT_SECONDS_BUCKETS,
    )
}

/// Installs the Prometheus recorder for this process and keeps its histograms
/// trimmed. Call once, before the worker starts.
pub fn install() -> Result<PrometheusHandle, CliError> {
    let handle = builder()
        .install_recorder()
        .map_err(|err| CliError::Failed(format!("cannot install the metrics recorder: {err}")))?;
    names::describe();
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(5));
        loop {
            every.tick().await;
            upkeep.run_upkeep();
        }
    });
    Ok(handle)
}

/// Binds `addr` and serves `GET /metrics` from `handle` in the background. Refuses
/// an address other than loopback unless `public`: the endpoint has no
/// authentication. Returns the bound address (port 0 picks a free one).
pub async fn serve(
    addr: &str,
    public: bool,
    handle: PrometheusHandle,
) -> Result<SocketAddr, CliError> {
    let addr: SocketAddr = addr.parse().map_err(|_| {
        InputError::new(
            "metrics-addr",
            format!("{addr:?} is not an address like 127.0.0.1:9464"),
        )
    })?;
    if !addr.ip().is_loopback() && !public {
        return Err(InputError::new(
            "metrics-addr",
            format!("{addr} is not a loopback address and /metrics has no authentication; add --metrics-public to serve it anyway"),
        )
        .into());
    }
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|err| CliError::Failed(format!("cannot listen on {addr} for metrics: {err}")))?;
    let bound = listener.local_addr()?;
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let handle = handle.clone();
            async move { ([(header::CONTENT_TYPE, EXPOSITION)], handle.render()) }
        }),
    );
    tokio::spawn(async move {
        if let Err(err) = axum::serve(listener, app).await {
            tracing::error!(error = %err, "the metrics server stopped");
        }
    });
    Ok(bound)
}

/// Runs `revenant metrics`.
pub async fn run(store: &Arc<dyn Store>, args: MetricsArgs) -> Result<ExitCode, CliError> {
    let alive_within = revenant::duration::parse("alive-within", &args.alive_within)?;
    let stats = store
        .queue_stats(QueueStatsParams {
            worker_alive_within: alive_within,
            ..QueueStatsParams::default()
        })
        .await?;
    let dependencies = store
        .dependency_list(DependencyListParams::default())
        .await?;
    // A recorder of our own, not installed: only these gauges, nothing global.
    let recorder = builder().build_recorder();
    ::metrics::with_local_recorder(&recorder, || {
        names::describe();
        names::build_info(store.backend());
        names::queue_gauges(&stats);
        names::dependency_gauges(&dependencies);
    });
    print!("{}", recorder.handle().render());
    Ok(ExitCode::SUCCESS)
}

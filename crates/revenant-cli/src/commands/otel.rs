//! `--otlp-endpoint` and the standard `OTEL_*` variables: the OpenTelemetry tracer
//! provider whose exporter sends the worker's attempt spans over OTLP (HTTP with
//! protobuf, the collector's port 4318). See docs/tracing.md.
//!
//! On when `--otlp-endpoint` is given, or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set; off otherwise, and off whatever else is set
//! when `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`. Off, nothing is built:
//! no exporter, no thread, no span. The exporter reads the rest of the standard
//! variables itself (`OTEL_EXPORTER_OTLP_HEADERS`, `..._TIMEOUT`, the batch processor's
//! `OTEL_BSP_*`), and the resource `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`.

use opentelemetry_otlp::{SpanExporter, WithExportConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use revenant::InputError;

use crate::error::CliError;

/// A running OTLP exporter behind a tracer provider.
pub struct Tracing {
    provider: SdkTracerProvider,
    endpoint: String,
}

impl Tracing {
    /// The provider to give the worker.
    pub fn provider(&self) -> &SdkTracerProvider {
        &self.provider
    }

    /// Where the spans go, for the start banner.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Sends the spans still batched and stops the exporter's thread (a blocking call,
    /// so off the async threads). A collector that does not answer costs the
    /// exporter's timeout at most, and is logged, never fatal.
    pub async fn shutdown(self) {
        let provider = self.provider;
        let done = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        if let Ok(Err(err)) = done {
            tracing::warn!(error = %err, "the OTLP exporter did not shut down cleanly; the last spans may be lost");
        }
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The tracer provider the flag and the environment ask for, or `None` (tracing off).
/// `service` names the process when `OTEL_SERVICE_NAME` does not.
pub fn from_config(flag: Option<&str>, service: &'static str) -> Result<Option<Tracing>, CliError> {
    let disabled = env("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
        || env("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"));
    let from_env = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT").map(|base| traces_url(&base)));
    let endpoint = match (flag, from_env) {
        (Some(url), _) => {
            check_url(url)?;
            Some(traces_url(url))
        }
        (None, from_env) if !disabled => from_env,
        (None, _) => None,
    };
    let Some(endpoint) = endpoint else {
        return Ok(None);
    };
    let mut exporter = SpanExporter::builder().with_http();
    if flag.is_some() {
        exporter = exporter.with_endpoint(endpoint.clone());
    }
    let exporter = exporter.build().map_err(|err| {
        CliError::from(InputError::new(
            "otlp-endpoint",
            format!("cannot build the OTLP exporter for {endpoint}: {err}"),
        ))
    })?;
    let mut resource = Resource::builder();
    if env("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name(service);
    }
    let provider = SdkTracerProvider::builder()
        .with_resource(resource.build())
        .with_batch_exporter(exporter)
        .build();
    Ok(Some(Tracing { provider, endpoint }))
}

/// `--otlp-endpoint` must be an http(s) URL.
fn check_url(url: &str) -> Result<(), InputError> {
    let ok = (url.starts_with("http://") || url.starts_with("https://"))
        && url.len() > "https://".len()
        && !url.contains(char::is_whitespace);
    if ok {
        Ok(())
    } else {
        Err(InputError::new(
            "otlp-endpoint",
            format!("{url:?} is not an http:// or https:// URL, e.g. http://127.0.0.1:4318"),
        ))
    }
}

/// A collector's base URL with the traces path, as `OTEL_EXPORTER_OTLP_ENDPOINT` is
/// read: `http://host:4318` → `http://host:4318/v1/traces`; a URL already ending in
/// `/v1/traces` is kept.
fn traces_url(base: &str) -> String {
    let base = base.trim_end_matches('/');
    if base.ends_with("/v1/traces") {
        base.to_string()
    } else {
        format!("{base}/v1/traces")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_gets_the_traces_path_once() {
        assert_eq!(traces_url("http://c:4318"), "http://c:4318/v1/traces");
        assert_eq!(traces_url("http://c:4318/"), "http://c:4318/v1/traces");
        assert_eq!(
            traces_url("http://c:4318/v1/traces"),
            "http://c:4318/v1/traces"
        );
        assert!(check_url("http://127.0.0.1:4318").is_ok());
        for bad in ["127.0.0.1:4318", "ftp://x", "http://", "http://a b"] {
            assert_eq!(check_url(bad).unwrap_err().field, "otlp-endpoint", "{bad}");
        }
    }
}

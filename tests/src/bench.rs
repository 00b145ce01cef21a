//! What the bench binaries (tests/src/bin/bench_*.rs) share: their one clock read, milliseconds
//! as a float, and `--name N` options.

use anyhow::{ensure, Result};
use bytes::Bytes;
use control_plane::client::{full_body, ReqBody};
use http_body_util::BodyExt;
use hyper::header::{self, HeaderMap};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as LegacyClient;
use hyper_util::rt::TokioExecutor;
use std::time::{Duration, Instant};

/// The benchmark's one clock read.
#[allow(clippy::disallowed_methods)] // reason: a benchmark measures wall-clock time
pub fn now() -> Instant {
    Instant::now()
}

/// `d` in milliseconds.
/// The `p` quantile (0..=1) of `v` by nearest rank; NaN when `v` is empty.
pub fn percentile(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The value of `--name N` on the command line, or `default` when absent or not a number.
pub fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Whether `--smoke` was given: a few runs of everything, seconds to a minute in all, so that CI
/// runs every bench (its timings printed, never asserted) and none can rot unnoticed.
pub fn smoke() -> bool {
    std::env::args().any(|a| a == "--smoke")
}

/// `full`, or `tiny` in a smoke run.
pub fn size<T>(full: T, tiny: T) -> T {
    if smoke() {
        tiny
    } else {
        full
    }
}

/// The load average over 1, 5 and 15 minutes (`/proc/loadavg`), for a bench to print beside its
/// figures.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|t| t.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// The command line after the program's name, without `--smoke`.
pub fn args() -> impl Iterator<Item = String> {
    std::env::args().skip(1).filter(|a| a != "--smoke")
}

/// An API client beside the shipped one: keep-alive like it, but with `TCP_NODELAY`, so a
/// bench can tell a Nagle or delayed-ACK stall from the work behind a request, and send any
/// method, headers and body.
pub struct NoDelayClient {
    base: String,
    token: String,
    http: LegacyClient<HttpConnector, ReqBody>,
}

impl NoDelayClient {
    /// A client of the API at `base` (`http://host:port`) with its token.
    pub fn new(base: &str, token: &str) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        Self {
            base: base.to_string(),
            token: token.to_string(),
            http: LegacyClient::builder(TokioExecutor::new()).build(connector),
        }
    }

    /// Sends a request with the token and `headers`; the status, the response's headers and
    /// its whole body.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<(StatusCode, HeaderMap, Bytes)> {
        let mut req = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header(header::AUTHORIZATION, format!("Bearer {}", self.token));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = self.http.request(req.body(full_body(body))?).await?;
        let (parts, body) = resp.into_parts();
        let body = body.collect().await?.to_bytes();
        Ok((parts.status, parts.headers, body))
    }

    /// POSTs `body` as JSON; the JSON answer, or an error naming a status other than success.
    pub async fn post_json(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<serde_json::Value> {
        let (status, _, bytes) = self
            .send(
                Method::POST,
                path,
                &[("content-type", "application/json")],
                serde_json::to_vec(body)?.into(),
            )
            .await?;
        ensure!(
            status.is_success(),
            "HTTP {status}: {}",
            String::from_utf8_lossy(&bytes)
        );
        Ok(serde_json::from_slice(&bytes)?)
    }
}

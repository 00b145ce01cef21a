//! The cost of a tool call through MCP (issue 16) against the same operation through the HTTP
//! API, in the same run, from the same HTTP client (hyper, one pooled connection each way, no
//! Nagle), on one local computer:
//!
//! - **shell**: MCP `tools/call shell {"command": "true"}` against `POST /v1/computers/{id}/exec`
//!   of `sh -c true` under the same lease (the session's), reading the NDJSON to its `exit`;
//! - **read_file**: MCP `tools/call read_file` of a 4 KiB file against `GET …/files/content`.
//!
//! The MCP side is a session opened with `initialize` (protocol 2025-11-25) on
//! `/v1/mcp/{computer}/{bot}`; each call is a JSON-RPC POST answered on an event stream, read to
//! the response. The two sides alternate, `--runs` times each after a warm-up; p50, p99 and the
//! MCP/HTTP ratio of each are printed.
//!
//! `cargo run -p tests --bin bench_mcp -- [--runs N] [--smoke]` (build the binaries first:
//! `cargo build --workspace --bins`).

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use hyper::Method;
use std::time::Duration;
use tests::bench::{arg, ms, now, NoDelayClient};
use tests::World;

const BOT: &str = "bot-bench";

/// The no-delay API client, answering with the MCP session id header (if any).
struct Raw(NoDelayClient);

impl Raw {
    fn new(base: &str, token: &str) -> Self {
        Self(NoDelayClient::new(base, token))
    }

    /// Sends a request; the status, the session id header (if any) and the whole body.
    async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<(u16, Option<String>, Bytes)> {
        let (status, headers, body) = self.0.send(method, path, headers, body).await?;
        let sid = headers
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(String::from);
        Ok((status.as_u16(), sid, body))
    }
}

/// An MCP session over raw HTTP: JSON-RPC POSTs answered on event streams.
struct Session<'a> {
    raw: &'a Raw,
    path: String,
    sid: String,
    next_id: u64,
}

const ACCEPT: &str = "application/json, text/event-stream";

/// The JSON-RPC message with `id` among an event stream's `data:` lines.
fn answer(body: &[u8], id: u64) -> Result<serde_json::Value> {
    let text = std::str::from_utf8(body)?;
    for line in text.lines() {
        if let Some(data) = line.strip_prefix("data:") {
            let data = data.trim();
            if data.is_empty() {
                continue;
            }
            let v: serde_json::Value = serde_json::from_str(data)?;
            if v["id"] == id {
                return Ok(v);
            }
        }
    }
    bail!("no answer with id {id} in {text}")
}

impl<'a> Session<'a> {
    async fn open(raw: &'a Raw, path: String) -> Result<Self> {
        let init = serde_json::json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "bench_mcp", "version": "0"}}
        });
        let headers = [("accept", ACCEPT), ("content-type", "application/json")];
        let (status, sid, body) = raw
            .send(Method::POST, &path, &headers, init.to_string().into())
            .await?;
        let sid = sid.ok_or_else(|| anyhow!("initialize ({status}) gave no session id"))?;
        answer(&body, 0).context("initialize")?;
        let initialized =
            serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let headers = [
            ("accept", ACCEPT),
            ("content-type", "application/json"),
            ("mcp-session-id", sid.as_str()),
            ("mcp-protocol-version", "2025-11-25"),
        ];
        raw.send(
            Method::POST,
            &path,
            &headers,
            initialized.to_string().into(),
        )
        .await?;
        Ok(Self {
            raw,
            path,
            sid,
            next_id: 1,
        })
    }

    /// One `tools/call`; its result, which must not be an error.
    async fn call(&mut self, tool: &str, args: serde_json::Value) -> Result<serde_json::Value> {
        let id = self.next_id;
        self.next_id += 1;
        let req = serde_json::json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": args}
        });
        let headers = [
            ("accept", ACCEPT),
            ("content-type", "application/json"),
            ("mcp-session-id", self.sid.as_str()),
            ("mcp-protocol-version", "2025-11-25"),
        ];
        let (_, _, body) = self
            .raw
            .send(Method::POST, &self.path, &headers, req.to_string().into())
            .await?;
        let v = answer(&body, id)?;
        if v["result"]["isError"] == true || v.get("error").is_some() {
            bail!("{tool} failed: {v}");
        }
        Ok(v["result"].clone())
    }

    async fn close(self) -> Result<()> {
        let headers = [("mcp-session-id", self.sid.as_str())];
        self.raw
            .send(Method::DELETE, &self.path, &headers, Bytes::new())
            .await?;
        Ok(())
    }
}

fn percentile(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn report(what: &str, mcp: &[f64], http: &[f64]) {
    let (m50, m99) = (percentile(mcp, 0.5), percentile(mcp, 0.99));
    let (h50, h99) = (percentile(http, 0.5), percentile(http, 0.99));
    println!(
        "{what:<10} MCP p50 {m50:7.2} ms p99 {m99:7.2} ms | HTTP p50 {h50:7.2} ms p99 {h99:7.2} ms | MCP/HTTP p50 {:.2}x p99 {:.2}x",
        m50 / h50,
        m99 / h99
    );
}

#[tokio::main]
async fn main() -> Result<()> {
    tests::bench::Usage::new(
        "a tool call through MCP against the same operation through the HTTP API",
    )
    .flag(
        "--runs",
        "N",
        "measured calls of each kind (default 200; smoke 10)",
    )
    .check();
    // `--smoke`: a few runs, for a quick check; an explicit `--runs` still wins.
    let smoke = std::env::args().any(|a| a == "--smoke");
    let runs = arg("--runs", if smoke { 10 } else { 200 });
    let mut w = World::start().await?;
    let c = w.create_computer("ws-bench-mcp").await?;
    let raw = Raw::new(&w.http, w.api_token());
    let mut s = Session::open(&raw, format!("/v1/mcp/{c}/{BOT}")).await?;
    // The session's lease: the HTTP side runs under the same one.
    let lease = w
        .client
        .json(
            Method::GET,
            &format!("/v1/computers/{c}/leases/{BOT}"),
            None,
        )
        .await?["lease"]
        .as_str()
        .ok_or_else(|| anyhow!("the session holds no lease"))?
        .to_string();
    let file = "bench/file.txt";
    s.call(
        "write_file",
        serde_json::json!({"path": file, "content": "x".repeat(4096)}),
    )
    .await?;
    let exec_body = serde_json::json!({
        "argv": ["sh", "-c", "true"], "bot": BOT, "lease": lease,
    })
    .to_string();
    let exec_path = format!("/v1/computers/{c}/exec");
    let read_path = format!("/v1/computers/{c}/files/content?path={file}&bot={BOT}&lease={lease}");
    let json = [("content-type", "application/json")];

    let (mut shell_mcp, mut shell_http, mut read_mcp, mut read_http) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let warmup = 5;
    for i in 0..runs + warmup {
        let t = now();
        let r = s
            .call("shell", serde_json::json!({"command": "true"}))
            .await?;
        let mcp = ms(t.elapsed());
        let out = r["content"][0]["text"].as_str().unwrap_or_default();
        if !out.starts_with("exit code: 0") {
            bail!("shell said {out}");
        }
        let t = now();
        let (status, _, body) = raw
            .send(Method::POST, &exec_path, &json, exec_body.clone().into())
            .await?;
        let http = ms(t.elapsed());
        if status != 200 || !String::from_utf8_lossy(&body).contains("\"exit\"") {
            bail!("exec answered {status}: {}", String::from_utf8_lossy(&body));
        }
        if i >= warmup {
            shell_mcp.push(mcp);
            shell_http.push(http);
        }

        let t = now();
        let r = s
            .call("read_file", serde_json::json!({"path": file}))
            .await?;
        let mcp = ms(t.elapsed());
        if r["content"][0]["text"].as_str().map(str::len) != Some(4096) {
            bail!("read_file said {r}");
        }
        let t = now();
        let (status, _, body) = raw.send(Method::GET, &read_path, &[], Bytes::new()).await?;
        let http = ms(t.elapsed());
        if status != 200 || body.len() != 4096 {
            bail!("read answered {status} with {} bytes", body.len());
        }
        if i >= warmup {
            read_mcp.push(mcp);
            read_http.push(http);
        }
    }
    s.close().await?;
    println!(
        "bench_mcp: {runs} runs each, alternating, after {warmup} warm-up runs; one local computer"
    );
    report("shell", &shell_mcp, &shell_http);
    report("read_file", &read_mcp, &read_http);
    // The session's release runs after the DELETE's answer; let it finish before the world goes.
    tokio::time::sleep(Duration::from_millis(500)).await;
    w.check_log()?;
    Ok(())
}

//! The exec round trips of `bench_foundation` through the three HTTP clients, against spawning
//! `true` and `GET /v1/computers/{id}`, and their table.

use super::*;

/// The ways the bench reaches the API.
///
/// `Shipped` is `control_plane::client::Client`, what the CLI uses: one pooled keep-alive
/// connection, Nagle's algorithm left on. `NoDelay` is the same with `TCP_NODELAY` on the
/// client's socket. `Fresh` also sets `TCP_NODELAY` and opens a new connection per request, as
/// `curl` does for a single URL; a new connection starts in quick-ACK mode, so a response the
/// server writes in pieces never waits for a delayed ACK.
pub(super) enum Http {
    Shipped(Client),
    Raw {
        base: String,
        token: String,
        http: LegacyClient<HttpConnector, ReqBody>,
    },
}

impl Http {
    fn raw(base: &str, token: &str, fresh_connections: bool) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let mut builder = LegacyClient::builder(TokioExecutor::new());
        if fresh_connections {
            builder.pool_max_idle_per_host(0);
        }
        Http::Raw {
            base: base.to_string(),
            token: token.to_string(),
            http: builder.build(connector),
        }
    }

    /// Sends a request and reads the whole response (a non-2xx status is an error). Returns the
    /// body and when the response head arrived.
    async fn request(
        &self,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        body: Bytes,
    ) -> Result<(Bytes, Instant)> {
        match self {
            Http::Shipped(client) => {
                let resp = client
                    .send(method, path, content_type, None, full_body(body))
                    .await?;
                let head = now();
                Ok((resp.into_body().collect().await?.to_bytes(), head))
            }
            Http::Raw { base, token, http } => {
                let mut req = hyper::Request::builder()
                    .method(method)
                    .uri(format!("{base}{path}"))
                    .header(header::AUTHORIZATION, format!("Bearer {token}"));
                if let Some(ct) = content_type {
                    req = req.header(header::CONTENT_TYPE, ct);
                }
                let resp = http.request(req.body(full_body(body))?).await?;
                let head = now();
                let status = resp.status();
                let bytes = resp.into_body().collect().await?.to_bytes();
                ensure!(
                    status.is_success(),
                    "HTTP {status}: {}",
                    String::from_utf8_lossy(&bytes)
                );
                Ok((bytes, head))
            }
        }
    }
}

/// One timed request: to the response head, and to the end of the body.
#[derive(Clone, Copy)]
pub(super) struct Timed {
    pub(super) head: Duration,
    pub(super) total: Duration,
}

async fn exec_true(http: &Http, computer: &str) -> Result<Timed> {
    let t = now();
    let (body, head) = http
        .request(
            Method::POST,
            &format!("/v1/computers/{}/exec", q(computer)),
            Some("application/json"),
            Bytes::from_static(br#"{"argv":["true"]}"#),
        )
        .await?;
    let total = now() - t;
    let out = ExecOutput::parse(&body);
    ensure!(
        out.code == Some(0),
        "exec of true ended with {:?}: {}",
        out.code,
        String::from_utf8_lossy(&body)
    );
    Ok(Timed {
        head: head - t,
        total,
    })
}

async fn get_computer(http: &Http, computer: &str) -> Result<Timed> {
    let t = now();
    let (body, head) = http
        .request(
            Method::GET,
            &format!("/v1/computers/{}", q(computer)),
            None,
            Bytes::new(),
        )
        .await?;
    let total = now() - t;
    let v: serde_json::Value = serde_json::from_slice(&body)?;
    ensure!(v["id"] == computer, "unexpected computer {v}");
    Ok(Timed {
        head: head - t,
        total,
    })
}

/// Spawns `true` the way the guest does (stdin null, stdout and stderr piped and read to EOF).
fn spawn_true() -> Result<()> {
    let out = Command::new("true")
        .stdin(Stdio::null())
        .output()
        .context("spawn true")?;
    ensure!(out.status.success(), "true failed: {}", out.status);
    Ok(())
}

/// The latency rows after the spawn floor: what is sent, through which client.
const ROWS: [(&str, &str); 4] = [
    (
        "`GET /v1/computers/{id}` (HTTP + DB, no tunnel)",
        "shipped `Client` (keep-alive)",
    ),
    (
        "exec `true`: API → tunnel → guest",
        "shipped `Client` (keep-alive)",
    ),
    (
        "exec `true`: API → tunnel → guest",
        "keep-alive, client `TCP_NODELAY`",
    ),
    (
        "exec `true`: API → tunnel → guest",
        "new connection per request, `TCP_NODELAY`",
    ),
];

/// Samples of the spawn floor and of each of [`ROWS`], in round order.
pub(super) struct Latencies {
    pub(super) spawn: Vec<Duration>,
    pub(super) rows: Vec<Vec<Timed>>,
}

pub(super) async fn measure_exec(server: &Server, opts: &Options) -> Result<Latencies> {
    let id = server.computer.as_str();
    let shipped = Http::Shipped(server.client.clone());
    let nodelay = Http::raw(&server.http, &server.token, false);
    let fresh = Http::raw(&server.http, &server.token, true);
    let mut l = Latencies {
        spawn: Vec::new(),
        rows: vec![Vec::new(); ROWS.len()],
    };
    for round in 0..opts.warmups + opts.exec_runs {
        let keep = round >= opts.warmups;
        let t = now();
        // A blocking spawn is what the anchor measures; the runtime has threads to spare.
        tokio::task::block_in_place(spawn_true)?;
        let spawn = now() - t;
        let timed = [
            get_computer(&shipped, id).await?,
            exec_true(&shipped, id).await?,
            exec_true(&nodelay, id).await?,
            exec_true(&fresh, id).await?,
        ];
        if keep {
            l.spawn.push(spawn);
            for (row, t) in l.rows.iter_mut().zip(timed) {
                row.push(t);
            }
        }
    }
    Ok(l)
}

pub(super) fn print_exec(l: &Latencies, opts: &Options) {
    let spawn = summarize(&l.spawn);
    println!(
        "### Exec round trip of `true` ({} runs per row after {} warm-ups, interleaved)\n",
        opts.exec_runs, opts.warmups
    );
    println!(
        "| measure | client | p50 ms | p99 ms | mean ms | p50 / spawn p50 | response head p50 ms |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|");
    println!(
        "| spawn `true` directly (floor) | — | {:.3} | {:.3} | {:.3} | 1.00× | — |",
        ms(spawn.p50),
        ms(spawn.p99),
        ms(spawn.mean)
    );
    let summaries: Vec<(Summary, Summary)> = l
        .rows
        .iter()
        .map(|r| {
            let total: Vec<Duration> = r.iter().map(|t| t.total).collect();
            let head: Vec<Duration> = r.iter().map(|t| t.head).collect();
            (summarize(&total), summarize(&head))
        })
        .collect();
    for ((name, client), (total, head)) in ROWS.iter().zip(&summaries) {
        println!(
            "| {name} | {client} | {:.3} | {:.3} | {:.3} | {:.2}× | {:.3} |",
            ms(total.p50),
            ms(total.p99),
            ms(total.mean),
            ms(total.p50) / ms(spawn.p50),
            ms(head.p50)
        );
    }
    println!();
    let get = &summaries[0].0;
    for ((_, client), (exec, head)) in ROWS.iter().zip(&summaries).skip(1) {
        let added = ms(exec.p50) - ms(spawn.p50);
        println!(
            "- {client}: added at p50 = exec p50 − spawn p50 = **{added:.3} ms** (goal ≤ 3 ms: \
             {}); added at p99 = {:.3} ms; from the response head (sent once the guest reports \
             `started`) to the end of the body: {:.3} ms at p50",
            if added <= 3.0 { "met" } else { "missed" },
            ms(exec.p99) - ms(spawn.p99),
            ms(exec.p50) - ms(head.p50)
        );
    }
    println!(
        "- HTTP + database alone (the GET, keep-alive): {:.3} ms at p50\n",
        ms(get.p50)
    );
}

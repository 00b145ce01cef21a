//! The soak's bots: an exec bot per exec computer and a desktop bot per desktop computer, each
//! in a loop of runs until the soak stops, through their own replica (the next one while it
//! refuses connections, as a client with several addresses does).

use super::{class_of, Plan};
use crate::fixture::Fixture;
use bytes::Bytes;
use control_plane::client::{full_body, q, Client, ClientError};
use http_body_util::BodyExt;
use hyper::Method;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// An operation that has not answered in this long counts as a `timeout` failure.
const OP_TIMEOUT: Duration = Duration::from_secs(60);
/// A desktop bot's run lasts about this long.
const DESKTOP_RUN: Duration = Duration::from_secs(30);
/// A desktop bot's lease TTL (its runs are shorter).
const DESKTOP_TTL_MS: u64 = 60_000;

/// The page the desktop bot drives: a click on the button focuses the input, whose every
/// change is reported to the fixture (`/event?value=`).
pub const ACT_PAGE: &str = r#"<!doctype html><html><head><meta charset="utf-8"><title>soak</title>
<style>html,body{margin:0;height:100%} #go{position:fixed;left:0;top:0;width:100%;height:45%;font-size:40px}
#t{position:fixed;left:0;top:55%;width:100%;height:30%;font-size:30px}</style></head><body>
<button id="go">Press me</button><input id="t" autocomplete="off">
<script>
const go = document.getElementById('go'), t = document.getElementById('t');
go.addEventListener('click', () => { t.focus(); });
t.addEventListener('input', () => fetch('/event?value=' + encodeURIComponent(t.value.slice(-200))));
</script></body></html>"#;

/// A failed operation.
#[derive(Debug, Clone)]
pub struct Failure {
    /// Seconds since the start when it was sent and when it failed.
    pub at: f64,
    pub end: f64,
    pub op: &'static str,
    pub class: String,
    /// An acquire refused while this bot's own walked-away lease had not lapsed yet.
    pub explained: bool,
    pub detail: String,
}

/// A checkpoint answered OK: its revision and a file written (answered OK) before it.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    pub computer: String,
    pub revision: u64,
    pub cause: &'static str,
    pub path: String,
    pub content: String,
    /// Seconds since the start when it was answered.
    pub at: f64,
}

/// What one bot did.
#[derive(Debug, Default)]
pub struct Tally {
    pub bot: String,
    pub computer: String,
    pub ops: BTreeMap<&'static str, u64>,
    pub failures: Vec<Failure>,
    pub checkpoints: Vec<Checkpoint>,
    /// Seconds since the start of each lease it walked away from.
    pub walked_away: Vec<f64>,
    /// Text typed by desktop acts answered OK.
    pub typed: Vec<String>,
    pub violations: Vec<String>,
    /// The TTL of the bot's leases.
    pub ttl_ms: u64,
}

/// What every bot shares.
pub struct Ctx {
    clients: Vec<Client>,
    t0: Instant,
    stop: Arc<AtomicBool>,
    plan: Plan,
}

impl Ctx {
    fn now(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// The bots of a soak, running.
pub struct Bots {
    handles: Vec<tokio::task::JoinHandle<Tally>>,
}

impl Bots {
    pub fn start(
        plan: &Plan,
        clients: Vec<Client>,
        computers: &[String],
        desktops: &[String],
        fixture: &Fixture,
        t0: Instant,
        stop: Arc<AtomicBool>,
    ) -> Self {
        let ctx = Arc::new(Ctx {
            clients,
            t0,
            stop,
            plan: plan.clone(),
        });
        let mut handles = Vec::new();
        for (k, c) in computers.iter().enumerate() {
            handles.push(tokio::spawn(exec_bot(ctx.clone(), k, c.clone())));
        }
        let url = fixture.page("soak", ACT_PAGE);
        for (k, c) in desktops.iter().enumerate() {
            handles.push(tokio::spawn(desktop_bot(
                ctx.clone(),
                k,
                c.clone(),
                url.clone(),
            )));
        }
        Self { handles }
    }

    pub async fn join(self) -> anyhow::Result<Vec<Tally>> {
        let mut out = Vec::new();
        for h in self.handles {
            out.push(h.await?);
        }
        Ok(out)
    }
}

/// A bot's way to the replicas: its own, or the next while its own refuses connections.
struct Router {
    ctx: Arc<Ctx>,
    home: usize,
    cur: usize,
}

impl Router {
    fn client(&self) -> &Client {
        &self.ctx.clients[self.cur]
    }

    fn failed(&mut self, class: &str) {
        if class == "connect" || class == "broken_response" {
            self.cur = (self.cur + 1) % self.ctx.clients.len();
        }
    }
}

/// One bot's state while it runs.
struct Runner {
    ctx: Arc<Ctx>,
    r: Router,
    t: Tally,
    /// Until when (seconds since the start) a `lease_held` is this bot's own walked-away lease.
    own_lease_until: f64,
}

impl Runner {
    fn new(ctx: Arc<Ctx>, home: usize, bot: String, computer: String) -> Self {
        let home = home % ctx.clients.len();
        Self {
            r: Router {
                ctx: ctx.clone(),
                home,
                cur: home,
            },
            ctx,
            t: Tally {
                bot,
                computer,
                ..Default::default()
            },
            own_lease_until: f64::MIN,
        }
    }

    fn ok(&mut self, op: &'static str) {
        *self.t.ops.entry(op).or_default() += 1;
    }

    /// Takes back a success [`Self::call`] counted for an answer that then said it failed.
    fn uncount(&mut self, op: &'static str) {
        if let Some(n) = self.t.ops.get_mut(op) {
            *n = n.saturating_sub(1);
        }
    }

    fn fail(&mut self, op: &'static str, at: f64, class: String, detail: String) {
        let end = self.ctx.now();
        let explained = class == "lease_held" && end < self.own_lease_until;
        self.r.failed(&class);
        self.t.failures.push(Failure {
            at,
            end,
            op,
            class,
            explained,
            detail,
        });
    }

    /// Walks away from the lease it holds (a run that crashed): it lapses after its TTL.
    fn walk_away(&mut self, ttl_ms: u64) {
        let now = self.ctx.now();
        self.t.walked_away.push(now);
        self.own_lease_until = now + ttl_ms as f64 / 1000.0 + 3.0;
    }

    /// Runs `f` on the current replica's client, bounded by [`OP_TIMEOUT`]; records a failure.
    async fn call<T, F, Fut>(&mut self, op: &'static str, f: F) -> Option<T>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = Result<T, ClientError>>,
    {
        let at = self.ctx.now();
        match tokio::time::timeout(OP_TIMEOUT, f(self.r.client().clone())).await {
            Ok(Ok(v)) => {
                self.ok(op);
                Some(v)
            }
            Ok(Err(e)) => {
                self.fail(op, at, class_of(&e), e.to_string());
                None
            }
            Err(_) => {
                self.fail(op, at, "timeout".into(), String::new());
                None
            }
        }
    }

    /// Writes `soak/<bot>-<run>.txt`, which every later checkpoint must hold; its path and
    /// content once answered OK.
    async fn write_marker(&mut self, run: u32, owner: &str) -> Option<(String, String)> {
        let path = format!("soak/{}-{run}.txt", self.t.bot);
        let content = format!("{owner} wrote this at {:.3}", self.ctx.now());
        let file = files_path(&self.t.computer, &path);
        let data = content.clone().into_bytes();
        self.call("write", |c| async move { put(&c, &file, data).await })
            .await?;
        Some((path, content))
    }

    /// POSTs `body` as JSON to `path` through [`Self::call`].
    async fn post(&mut self, op: &'static str, path: &str, body: &Value) -> Option<Value> {
        self.call(op, |c| async move {
            c.json(Method::POST, path, Some(body)).await
        })
        .await
    }

    /// Takes the bot's lease for `owner` (asking again, with the same owner, after a failure:
    /// an acquire whose answer was lost may have been granted); `None` once the soak stops.
    async fn acquire(&mut self, owner: &str, ttl_ms: u64) -> Option<String> {
        let path = format!(
            "/v1/computers/{}/leases/{}/acquire",
            q(&self.t.computer),
            q(&self.t.bot)
        );
        let body = json!({ "owner": owner, "ttl_ms": ttl_ms });
        while !self.ctx.stopped() {
            let v = self.post("acquire", &path, &body).await;
            if let Some(v) = v {
                match v["lease"].as_str() {
                    Some(l) => return Some(l.to_string()),
                    None => self.t.violations.push(format!("acquire answered {v}")),
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        None
    }

    /// Releases `lease` (outcome success); records the run-end checkpoint it saved, whose
    /// content includes `marker`. `false` if the release failed.
    async fn release(&mut self, lease: &str, marker: Option<&(String, String)>) -> bool {
        let path = format!(
            "/v1/computers/{}/leases/{}/release",
            q(&self.t.computer),
            q(&self.t.bot)
        );
        let body = json!({ "lease": lease, "outcome": "success" });
        let at = self.ctx.now();
        let Some(v) = self.post("release", &path, &body).await else {
            return false;
        };
        let cp = &v["checkpoint"];
        match cp["status"].as_str() {
            Some("saved") => match (cp["revision"].as_u64(), marker) {
                (Some(revision), Some((path, content))) => {
                    self.ok("checkpoint_run_end");
                    self.t.checkpoints.push(Checkpoint {
                        computer: self.t.computer.clone(),
                        revision,
                        cause: "run_end",
                        path: path.clone(),
                        content: content.clone(),
                        at: self.ctx.now(),
                    });
                }
                (Some(_), None) => self.ok("checkpoint_run_end"),
                (None, _) => self.t.violations.push(format!("release answered {v}")),
            },
            Some(s @ ("failed" | "skipped" | "deferred")) => self.fail(
                "checkpoint_run_end",
                at,
                format!("checkpoint_{s}"),
                v.to_string(),
            ),
            _ => self.t.violations.push(format!("release answered {v}")),
        }
        true
    }

    /// `POST …/home/checkpoint?wait_ms=`: records the revision, whose content includes `marker`.
    async fn checkpoint(&mut self, marker: &(String, String), wait_ms: u64) {
        let path = format!(
            "/v1/computers/{}/home/checkpoint?wait_ms={wait_ms}",
            q(&self.t.computer)
        );
        let at = self.ctx.now();
        let lines = self
            .call("checkpoint_manual", |c| async move {
                crate::post_ndjson(&c, &path).await
            })
            .await;
        let Some(lines) = lines else { return };
        // Counted below, by its last line.
        self.uncount("checkpoint_manual");
        let last = lines.last().cloned().unwrap_or_default();
        match (last["type"].as_str(), last["revision"].as_u64()) {
            (Some("done"), Some(revision)) => {
                self.ok("checkpoint_manual");
                self.t.checkpoints.push(Checkpoint {
                    computer: self.t.computer.clone(),
                    revision,
                    cause: "manual",
                    path: marker.0.clone(),
                    content: marker.1.clone(),
                    at: self.ctx.now(),
                });
            }
            (Some("error"), _) => {
                let code = last["code"]
                    .as_str()
                    .or(last["error"]["code"].as_str())
                    .unwrap_or("error_line")
                    .to_string();
                self.fail("checkpoint_manual", at, code, last.to_string());
            }
            _ => self
                .t
                .violations
                .push(format!("checkpoint answered {lines:?}")),
        }
    }
}

/// The class of an exec's stream that did not exit 0: its error event's code, else `exit_N`.
fn exec_class(out: &crate::ExecOutput) -> String {
    match &out.error {
        Some(e) => e["code"].as_str().unwrap_or("error_event").to_string(),
        None => format!("exit_{:?}", out.code),
    }
}

/// An exec bot: runs of acquire, exec, write, read, release (and now and then a checkpoint).
async fn exec_bot(ctx: Arc<Ctx>, k: usize, computer: String) -> Tally {
    let bot = format!("bot-{k}");
    let mut b = Runner::new(ctx.clone(), k, bot.clone(), computer.clone());
    let plan = ctx.plan.clone();
    b.t.ttl_ms = plan.ttl_ms;
    let exec_path = format!("/v1/computers/{}/exec", q(&computer));
    let mut last_marker: Option<(String, String)> = None;
    let mut run = 0u32;
    while !ctx.stopped() {
        run += 1;
        b.r.cur = b.r.home;
        let owner = format!("{bot}-run{run}");
        let Some(lease) = b.acquire(&owner, plan.ttl_ms).await else {
            break;
        };
        // Under the lease: a command, a file written and read back.
        let said = format!("{bot} run {run}");
        let spec = json!({
            "argv": ["sh", "-c", "echo \"$0\"", said],
            "bot": bot, "lease": lease,
        });
        let at = ctx.now();
        let out = b
            .call("exec", |c| {
                let (p, s) = (exec_path.clone(), spec.clone());
                async move { crate::exec_via(&c, &p, &s).await }
            })
            .await;
        let mut held_ok = match out {
            Some(out) if out.code == Some(0) => {
                let got = String::from_utf8_lossy(&out.stdout).into_owned();
                if got != format!("{said}\n") {
                    b.t.violations
                        .push(format!("exec printed {got:?}, not {said:?}"));
                }
                true
            }
            Some(out) => {
                // The stream was answered, then failed: not a success.
                b.uncount("exec");
                b.fail("exec", at, exec_class(&out), format!("{:?}", out.events));
                false
            }
            None => false,
        };
        if held_ok {
            held_ok = match b.write_marker(run, &owner).await {
                Some((path, content)) => {
                    last_marker = Some((path.clone(), content.clone()));
                    let file = files_path(&computer, &path);
                    let got = b
                        .call("read", |c| async move { get(&c, &file).await })
                        .await;
                    if let Some(got) = got.as_ref().filter(|g| g.as_ref() != content.as_bytes()) {
                        b.t.violations.push(format!(
                            "{path} read back as {:?}",
                            String::from_utf8_lossy(got)
                        ));
                    }
                    got.is_some()
                }
                None => false,
            };
        }
        if !held_ok || run.is_multiple_of(plan.abandon_every) {
            // A run that crashed (or saw its operation fail while it held the lease) walks away.
            b.walk_away(plan.ttl_ms);
            tokio::time::sleep(plan.pause).await;
            continue;
        }
        if !b.release(&lease, last_marker.as_ref()).await {
            b.walk_away(plan.ttl_ms);
        } else if run.is_multiple_of(plan.checkpoint_every) {
            if let Some(m) = last_marker.clone() {
                b.checkpoint(&m, plan.ttl_ms + 20_000).await;
            }
        }
        tokio::time::sleep(plan.pause).await;
    }
    b.t
}

/// `…/files/content?path=` of `computer`.
fn files_path(computer: &str, path: &str) -> String {
    format!(
        "/v1/computers/{}/files/content?path={}",
        q(computer),
        q(path)
    )
}

async fn put(c: &Client, path: &str, data: Vec<u8>) -> Result<(), ClientError> {
    let len = data.len() as u64;
    let resp = c
        .send(
            Method::PUT,
            path,
            Some("application/octet-stream"),
            Some(len),
            full_body(data),
        )
        .await?;
    resp.into_body()
        .collect()
        .await
        .map_err(|e| ClientError::BadResponse(e.to_string()))?;
    Ok(())
}

async fn get(c: &Client, path: &str) -> Result<Bytes, ClientError> {
    let resp = c
        .send(Method::GET, path, None, None, full_body(Bytes::new()))
        .await?;
    Ok(resp
        .into_body()
        .collect()
        .await
        .map_err(|e| ClientError::BadResponse(e.to_string()))?
        .to_bytes())
}

/// A desktop bot: runs of about [`DESKTOP_RUN`]: acquire, desktop ensured, the page opened,
/// then a click and typed text and an observation each second, a file written, release.
async fn desktop_bot(ctx: Arc<Ctx>, k: usize, computer: String, url: String) -> Tally {
    let bot = format!("desk-{k}");
    let mut b = Runner::new(ctx.clone(), k, bot.clone(), computer.clone());
    b.t.ttl_ms = DESKTOP_TTL_MS;
    let screen = |what: &str| format!("/v1/computers/{}/screens/{}/{what}", q(&computer), q(&bot));
    let mut run = 0u32;
    while !ctx.stopped() {
        run += 1;
        b.r.cur = b.r.home;
        let owner = format!("{bot}-run{run}");
        let Some(lease) = b.acquire(&owner, DESKTOP_TTL_MS).await else {
            break;
        };
        let began = crate::bench::now();
        let ensure = json!({ "lease": lease });
        let mut ok = b.post("ensure", &screen("ensure"), &ensure).await.is_some();
        if ok {
            let open = json!({ "lease": lease, "actions": [{ "type": "open", "url": url }] });
            ok = b.post("open", &screen("act"), &open).await.is_some();
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        let mut i = 0u32;
        while ok && !ctx.stopped() && began.elapsed() < DESKTOP_RUN {
            i += 1;
            let text = format!("r{run}i{i};");
            let act = json!({ "lease": lease, "actions": [
                { "type": "click", "x": 640, "y": 250 },
                { "type": "type", "text": text },
            ] });
            let acted = b.post("act", &screen("act"), &act).await;
            if let Some(v) = &acted {
                if v["completed"] == 2 {
                    b.t.typed.push(text);
                } else {
                    b.t.violations.push(format!("act answered {v}"));
                }
            }
            let obs = json!({ "lease": lease, "width": 320 });
            let seen = b.post("observe", &screen("observe"), &obs).await;
            if let Some(v) = &seen {
                if v["image"].as_str().is_none_or(str::is_empty) {
                    b.t.violations
                        .push(format!("observe answered no image: {}", v["kind"]));
                }
            }
            // A fenced-out or lapsed lease ends the run.
            let lost = b.t.failures.last().is_some_and(|f| {
                f.end >= b.ctx.now() - 0.5
                    && matches!(f.class.as_str(), "stale_lease" | "lease_mismatch")
            });
            if lost {
                ok = false;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        // A file written under the run, then the release's checkpoint.
        let marker = b.write_marker(run, &owner).await;
        if !b.release(&lease, marker.as_ref()).await {
            b.walk_away(DESKTOP_TTL_MS);
        }
        tokio::time::sleep(ctx.plan.pause).await;
    }
    b.t
}

//! What the bench binaries (tests/src/bin/bench_*.rs) share: their one clock read, milliseconds
//! as a float, and their command line ([`Usage`]: flags declared, checked before the bench runs,
//! `--help`).

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

/// One flag of a bench's command line.
#[derive(Debug, Clone, Copy)]
struct Flag {
    name: &'static str,
    /// What its value is (`N`, `PATH`); `None` for a switch.
    value: Option<&'static str>,
    help: &'static str,
}

/// What a bench's command line may hold: declared at the top of `main`, then [`Usage::check`]ed
/// before anything runs, so a mistyped flag (or `--help`) never starts a long benchmark. Every
/// bench also takes `--smoke` and `--help`.
#[derive(Debug, Clone)]
pub struct Usage {
    about: &'static str,
    flags: Vec<Flag>,
    /// A bench's one positional argument, if it takes one: its name and help.
    operand: Option<(&'static str, &'static str)>,
}

/// What [`Usage::parse`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// Run: the command line is valid.
    Run,
    /// `--help` (or `-h`): print this usage and exit.
    Help(String),
}

/// Flags the parsed command line named, for [`arg`] to check its name against.
static DECLARED: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();

impl Usage {
    /// A bench that measures `about` (one line), with no flags but `--smoke` yet.
    pub fn new(about: &'static str) -> Self {
        Self {
            about,
            flags: vec![Flag {
                name: "--smoke",
                value: None,
                help: "a few runs of everything, for CI (timings printed, never asserted)",
            }],
            operand: None,
        }
    }

    /// A flag taking a value (`value` names it: `N`, `PATH`).
    pub fn flag(mut self, name: &'static str, value: &'static str, help: &'static str) -> Self {
        self.flags.push(Flag {
            name,
            value: Some(value),
            help,
        });
        self
    }

    /// A flag without a value.
    pub fn switch(mut self, name: &'static str, help: &'static str) -> Self {
        self.flags.push(Flag {
            name,
            value: None,
            help,
        });
        self
    }

    /// One optional positional argument.
    pub fn operand(mut self, name: &'static str, help: &'static str) -> Self {
        self.operand = Some((name, help));
        self
    }

    /// The usage text of the bench `bin`.
    pub fn text(&self, bin: &str) -> String {
        let operand = self
            .operand
            .map(|(n, _)| format!(" [{n}]"))
            .unwrap_or_default();
        let mut out = format!("{bin}: {}\n\nusage: {bin} [FLAGS]{operand}\n", self.about);
        let shown = |f: &Flag| match f.value {
            Some(v) => format!("{} {v}", f.name),
            None => f.name.to_string(),
        };
        let width = self.flags.iter().map(|f| shown(f).len()).max().unwrap_or(0);
        if let Some((n, help)) = self.operand {
            out.push_str(&format!("\n  {n:width$}  {help}\n"));
        }
        out.push_str("\nflags:\n");
        for f in &self.flags {
            out.push_str(&format!("  {:width$}  {}\n", shown(f), f.help));
        }
        out.push_str(&format!("  {:width$}  this text\n", "--help"));
        out
    }

    /// Checks `args` (the command line after the program's name) of the bench `bin`: an
    /// unknown flag, a flag without its value, or an operand the bench does not take is an
    /// error naming it, followed by the usage.
    pub fn parse(&self, bin: &str, args: &[String]) -> std::result::Result<Parsed, String> {
        let mut operand = None;
        let mut it = args.iter();
        while let Some(a) = it.next() {
            if a == "--help" || a == "-h" {
                return Ok(Parsed::Help(self.text(bin)));
            }
            let refuse = |what: String| Err(format!("{bin}: {what}\n\n{}", self.text(bin)));
            match self.flags.iter().find(|f| f.name == a) {
                Some(Flag {
                    value: Some(v),
                    name,
                    ..
                }) => {
                    if it.next().is_none() {
                        return refuse(format!("{name} needs a value ({v})"));
                    }
                }
                Some(_) => {}
                None if a.starts_with('-') => return refuse(format!("unknown flag {a}")),
                None => match (self.operand, &operand) {
                    (Some(_), None) => operand = Some(a),
                    (Some(_), Some(_)) => return refuse(format!("one operand only, not {a}")),
                    (None, _) => return refuse(format!("unexpected argument {a}")),
                },
            }
        }
        Ok(Parsed::Run)
    }

    /// Checks this process's command line ([`Usage::parse`]): prints the usage and exits 0 on
    /// `--help`, prints the error and the usage and exits 2 on a bad command line; else
    /// returns, and [`arg`] may read the flags declared.
    pub fn check(self) {
        let mut argv = std::env::args();
        let bin = argv
            .next()
            .as_deref()
            .map(|p| p.rsplit('/').next().unwrap_or(p).to_string())
            .unwrap_or_else(|| "bench".into());
        let args: Vec<String> = argv.collect();
        match self.parse(&bin, &args) {
            Ok(Parsed::Run) => {
                let _ = DECLARED.set(self.flags.iter().map(|f| f.name).collect());
            }
            Ok(Parsed::Help(text)) => {
                print!("{text}");
                std::process::exit(0);
            }
            Err(e) => {
                eprint!("{e}");
                std::process::exit(2);
            }
        }
    }
}

/// The value of `--name N` on the command line, or `default` when absent. The bench must have
/// declared `name` ([`Usage::check`]: a name it did not is a bug, and panics); a value that is
/// not a number ends the process with an error naming it.
pub fn arg(name: &str, default: usize) -> usize {
    let declared = DECLARED
        .get()
        .expect("a bench checks its flags (bench::Usage::check) before reading one");
    assert!(declared.contains(&name), "flag {name} is not declared");
    let args: Vec<String> = std::env::args().collect();
    match args
        .iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
    {
        None => default,
        Some(v) => v.parse().unwrap_or_else(|_| {
            eprintln!("{name} takes a number, not {v:?}");
            std::process::exit(2);
        }),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn usage() -> Usage {
        Usage::new("guests started and driven at a rate")
            .flag("--guests", "N", "guests to start")
            .switch("--quiet", "no progress lines")
    }

    fn parse(u: &Usage, args: &[&str]) -> std::result::Result<Parsed, String> {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        u.parse("bench_x", &args)
    }

    #[test]
    fn declared_flags_pass() {
        let u = usage();
        for ok in [
            &[][..],
            &["--guests", "8"],
            &["--smoke", "--quiet", "--guests", "3"],
        ] {
            assert_eq!(parse(&u, ok), Ok(Parsed::Run), "{ok:?}");
        }
    }

    #[test]
    fn help_prints_every_flag() {
        for h in ["--help", "-h"] {
            let Ok(Parsed::Help(text)) = parse(&usage(), &["--guests", "8", h]) else {
                panic!("{h} is help");
            };
            assert!(text.starts_with("bench_x: guests started"), "{text}");
            for f in ["--guests N", "--quiet", "--smoke", "--help"] {
                assert!(text.contains(f), "{f} in {text}");
            }
        }
    }

    #[test]
    fn an_unknown_flag_a_missing_value_or_an_operand_is_refused_with_the_usage() {
        let u = usage();
        for (args, says) in [
            (&["--gusets", "8"][..], "unknown flag --gusets"),
            (&["--guests"], "--guests needs a value (N)"),
            (&["8"], "unexpected argument 8"),
            (&["-x"], "unknown flag -x"),
        ] {
            let err = parse(&u, args).expect_err("refused");
            assert!(err.starts_with(&format!("bench_x: {says}\n")), "{err}");
            assert!(
                err.contains("flags:\n") && err.contains("--guests N"),
                "{err}"
            );
        }
        // A bench that takes an operand takes one.
        let u = usage().operand("MIB", "the home's size");
        assert_eq!(parse(&u, &["64"]), Ok(Parsed::Run));
        let err = parse(&u, &["64", "65"]).expect_err("refused");
        assert!(
            err.starts_with("bench_x: one operand only, not 65\n"),
            "{err}"
        );
    }
}

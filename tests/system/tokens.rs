//! Scoped API tokens and console sessions (issue 31, docs/security.md#api-tokens), attacked
//! through every door: the HTTP API, the real CLI and the MCP endpoint. A token limited to
//! workspace `alpha` sees alpha's computer and nothing of `beta`'s (404, as a missing computer);
//! a viewer cannot change anything or take control (403); a console session's cookie works
//! until sign-out or revocation, and a state-changing request under it needs its CSRF token,
//! so a form posted from another site is refused.

use anyhow::{ensure, Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{header, Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use std::process::Output;
use tests::World;

/// One request as a browser or an attacker would send it.
struct Raw<'a> {
    method: Method,
    path: &'a str,
    headers: Vec<(&'a str, String)>,
    body: Option<(&'a str, String)>,
}

impl<'a> Raw<'a> {
    fn new(method: Method, path: &'a str) -> Self {
        Self {
            method,
            path,
            headers: Vec::new(),
            body: None,
        }
    }

    fn header(mut self, name: &'a str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    fn bearer(self, token: &str) -> Self {
        self.header("authorization", format!("Bearer {token}"))
    }

    fn cookie(self, value: &str) -> Self {
        self.header("cookie", format!("rakazo_session={value}"))
    }

    fn json(mut self, v: Value) -> Self {
        self.body = Some(("application/json", v.to_string()));
        self
    }

    fn form(mut self, text: &str) -> Self {
        self.body = Some(("application/x-www-form-urlencoded", text.to_string()));
        self
    }

    async fn send(self, w: &World) -> Result<(StatusCode, hyper::HeaderMap, Value)> {
        let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
        let mut req = Request::builder()
            .method(self.method)
            .uri(format!("{}{}", w.http, self.path));
        for (k, v) in &self.headers {
            req = req.header(*k, v);
        }
        let body = match self.body {
            Some((ct, text)) => {
                req = req.header(header::CONTENT_TYPE, ct);
                Full::new(Bytes::from(text))
            }
            None => Full::new(Bytes::new()),
        };
        let resp = client.request(req.body(body)?).await?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let bytes = resp.into_body().collect().await?.to_bytes();
        let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok((status, headers, value))
    }
}

/// The real CLI with `token` (the CLI suite's runner: a cleared environment, a deadline).
async fn cli(w: &World, token: &str, args: &[&str]) -> Result<Output> {
    crate::cli::rakazo_with(w, token, args, None).await
}

/// `rakazo token create …` with the server's token: the new token (stdout holds only it).
async fn make_token(w: &World, args: &[&str]) -> Result<String> {
    let mut all = vec!["token", "create"];
    all.extend_from_slice(args);
    let out = cli(w, w.api_token(), &all).await?;
    ensure!(
        out.status.success(),
        "{all:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let token = String::from_utf8(out.stdout)?.trim().to_string();
    ensure!(
        token.starts_with("rkz_") && !token.contains('\n'),
        "{token}"
    );
    Ok(token)
}

/// README.md's token block: each `rakazo …` line's words (single quotes are not used there).
fn readme_token_lines() -> Result<Vec<Vec<String>>> {
    let block = tests::readme::block("## People: scoped tokens and the console")?;
    Ok(block
        .lines()
        .map(|l| l.split_once(" #").map_or(l, |(code, _)| code).trim())
        .filter_map(|l| l.strip_prefix("rakazo "))
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect())
}

/// Runs the README's token lines as written: the tokens they make work as their role says,
/// the list shows them without values, and the revoked one stops working.
async fn readme_lines_run_as_written(w: &World) -> Result<()> {
    let lines = readme_token_lines()?;
    ensure!(lines.len() == 4, "{lines:?}");
    let mut made = Vec::new();
    for words in &lines {
        let mut words = words.clone();
        if let Some(last) = words.last_mut().filter(|l| *l == "tok_...") {
            // The id of the first token the block made.
            let out = cli(w, w.api_token(), &["token", "list", "--json"]).await?;
            let list: Value = serde_json::from_slice(&out.stdout)?;
            *last = list["tokens"][0]["id"]
                .as_str()
                .context("an id")?
                .to_string();
        }
        let args: Vec<&str> = words.iter().map(String::as_str).collect();
        let out = cli(w, w.api_token(), &args).await?;
        ensure!(
            out.status.success(),
            "README line {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8(out.stdout)?;
        match args[1] {
            "create" => made.push(stdout.trim().to_string()),
            "list" => {
                ensure!(stdout.lines().count() == 2, "{stdout}");
                ensure!(stdout.contains("viewer\tacme\tlive\talice"), "{stdout}");
                ensure!(made.iter().all(|t| !stdout.contains(t.as_str())));
            }
            _ => ensure!(stdout.starts_with("revoked tok_"), "{stdout}"),
        }
    }
    let [alice, ops] = &made[..] else {
        anyhow::bail!("the README's block made {} tokens", made.len());
    };
    let (s, _, _) = Raw::new(Method::GET, "/v1/computers")
        .bearer(alice)
        .send(w)
        .await?;
    ensure!(
        s == StatusCode::UNAUTHORIZED,
        "alice's token was revoked: {s}"
    );
    let (s, _, _) = Raw::new(Method::GET, "/v1/computers")
        .bearer(ops)
        .send(w)
        .await?;
    ensure!(s == StatusCode::OK);
    Ok(())
}

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("")
}

#[tokio::test(flavor = "multi_thread")]
async fn scoped_tokens_see_their_workspaces_only_through_api_cli_and_mcp() -> Result<()> {
    let mut w = World::start().await?;
    readme_lines_run_as_written(&w).await?;
    let alpha = w.create_computer("alpha").await?;
    let beta = w.create_computer("beta").await?;

    let viewer = make_token(&w, &["--role", "viewer", "--workspace", "alpha"]).await?;
    let operator = make_token(
        &w,
        &["--role", "operator", "--workspace", "alpha", "--name", "op"],
    )
    .await?;
    w.add_secret(&viewer);
    w.add_secret(&operator);

    // The API: the list holds alpha's computer only; beta's is missing, exactly as an unknown id.
    let (s, _, list) = Raw::new(Method::GET, "/v1/computers")
        .bearer(&viewer)
        .send(&w)
        .await?;
    ensure!(s == StatusCode::OK, "{s} {list}");
    let ids: Vec<&str> = list["computers"]
        .as_array()
        .context("computers")?
        .iter()
        .filter_map(|c| c["id"].as_str())
        .collect();
    ensure!(ids == [alpha.as_str()], "{ids:?}");
    // The console's list asks for each running computer's machine report too.
    let (s, _, list) = Raw::new(Method::GET, "/v1/computers?machine=true")
        .bearer(&viewer)
        .send(&w)
        .await?;
    ensure!(s == StatusCode::OK, "{s}");
    ensure!(
        list["computers"][0]["machine"]["memory_total_bytes"].as_u64() > Some(0),
        "{list}"
    );
    let (s, _, _) = Raw::new(Method::GET, "/v1/computers?machine=maybe")
        .bearer(&viewer)
        .send(&w)
        .await?;
    ensure!(s == StatusCode::BAD_REQUEST);
    let path = format!("/v1/computers/{beta}");
    let (s, _, hidden) = Raw::new(Method::GET, &path)
        .bearer(&viewer)
        .send(&w)
        .await?;
    let (s2, _, missing) = Raw::new(Method::GET, "/v1/computers/c-missing")
        .bearer(w.api_token())
        .send(&w)
        .await?;
    ensure!(s == StatusCode::NOT_FOUND && s2 == StatusCode::NOT_FOUND);
    ensure!(
        hidden["error"]["message"]
            .as_str()
            .map(|m| m.replace(&beta, "X"))
            == missing["error"]["message"]
                .as_str()
                .map(|m| m.replace("c-missing", "X")),
        "{hidden} vs {missing}"
    );
    // Even a route the viewer's role could never take answers 404 on beta's computer.
    let path = format!("/v1/computers/{beta}/stop");
    let (s, _, v) = Raw::new(Method::POST, &path)
        .bearer(&viewer)
        .send(&w)
        .await?;
    ensure!(s == StatusCode::NOT_FOUND, "{s} {v}");

    // A viewer may read alpha's computer, not change it or take control of it.
    let path = format!("/v1/computers/{alpha}");
    let (s, _, _) = Raw::new(Method::GET, &path)
        .bearer(&viewer)
        .send(&w)
        .await?;
    ensure!(s == StatusCode::OK);
    let path = format!("/v1/computers/{alpha}/stop");
    let (s, _, v) = Raw::new(Method::POST, &path)
        .bearer(&viewer)
        .send(&w)
        .await?;
    ensure!(
        s == StatusCode::FORBIDDEN && code(&v) == "forbidden",
        "{s} {v}"
    );
    let path = format!("/v1/computers/{alpha}/screens/bot-1/url");
    let (s, _, v) = Raw::new(Method::POST, &path)
        .bearer(&viewer)
        .json(json!({"policy": "control"}))
        .send(&w)
        .await?;
    ensure!(
        s == StatusCode::FORBIDDEN && code(&v) == "forbidden",
        "{s} {v}"
    );
    let path = format!("/v1/computers/{alpha}/terminals/bot-1/url");
    let (s, _, v) = Raw::new(Method::POST, &path)
        .bearer(&viewer)
        .send(&w)
        .await?;
    ensure!(s == StatusCode::FORBIDDEN, "{s} {v}");
    let path = format!("/v1/computers/{alpha}/exec");
    let (s, _, v) = Raw::new(Method::POST, &path)
        .bearer(&viewer)
        .json(json!({"argv": ["id"]}))
        .send(&w)
        .await?;
    ensure!(s == StatusCode::FORBIDDEN, "{s} {v}");
    // Tokens are an unlimited admin's.
    let (s, _, _) = Raw::new(Method::GET, "/v1/tokens")
        .bearer(&operator)
        .send(&w)
        .await?;
    ensure!(s == StatusCode::FORBIDDEN);
    // An operator of alpha makes alpha's computers only.
    let (s, _, v) = Raw::new(Method::POST, "/v1/computers")
        .bearer(&operator)
        .json(json!({"workspace": "beta"}))
        .send(&w)
        .await?;
    ensure!(s == StatusCode::FORBIDDEN, "{s} {v}");

    // The CLI: the same answers, as a person reads them.
    let out = cli(&w, &viewer, &["computer", "show", &beta]).await?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(!out.status.success() && err.contains(&beta), "{err}");
    let out = cli(&w, &viewer, &["computer", "list", "--json"]).await?;
    ensure!(out.status.success());
    let listed = String::from_utf8_lossy(&out.stdout);
    ensure!(
        listed.contains(&alpha) && !listed.contains(&beta),
        "{listed}"
    );
    let out = cli(&w, &viewer, &["computer", "stop", &alpha]).await?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(!out.status.success() && err.contains("viewer"), "{err}");
    let out = cli(&w, &operator, &["exec", &alpha, "--", "true"]).await?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cli(&w, &operator, &["exec", &beta, "--", "true"]).await?;
    ensure!(!out.status.success());

    // MCP: beta's endpoint is missing for alpha's tokens; a viewer may not drive a bot.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"}}});
    let mcp = |c: &str| format!("/v1/mcp/{c}/bot-1");
    for token in [&viewer, &operator] {
        let (s, _, v) = Raw::new(Method::POST, &mcp(&beta))
            .bearer(token)
            .header("accept", "application/json, text/event-stream")
            .json(init.clone())
            .send(&w)
            .await?;
        ensure!(s == StatusCode::NOT_FOUND, "{s} {v}");
    }
    let (s, _, _) = Raw::new(Method::POST, &mcp(&alpha))
        .bearer(&viewer)
        .header("accept", "application/json, text/event-stream")
        .json(init.clone())
        .send(&w)
        .await?;
    ensure!(s == StatusCode::FORBIDDEN);
    let (s, _, _) = Raw::new(Method::POST, &mcp(&alpha))
        .bearer(&operator)
        .header("accept", "application/json, text/event-stream")
        .json(init)
        .send(&w)
        .await?;
    ensure!(s == StatusCode::OK, "the operator's MCP initialize: {s}");

    // A console session: HttpOnly, SameSite=Strict cookie; CSRF on every change.
    let (s, h, session) = Raw::new(Method::POST, "/console/session")
        .json(json!({"token": operator}))
        .send(&w)
        .await?;
    ensure!(s == StatusCode::OK, "{s} {session}");
    let set = h
        .get(header::SET_COOKIE)
        .context("no cookie")?
        .to_str()?
        .to_string();
    ensure!(set.contains("HttpOnly") && set.contains("SameSite=Strict") && set.contains("Path=/"));
    let cookie = set
        .split(';')
        .next()
        .and_then(|p| p.strip_prefix("rakazo_session="))
        .context("cookie value")?
        .to_string();
    w.add_secret(&cookie);
    let csrf = session["csrf"].as_str().context("csrf")?.to_string();
    ensure!(session["role"] == "operator" && session.get("token").is_none());
    let path = format!("/v1/computers/{alpha}");
    let (s, _, _) = Raw::new(Method::GET, &path)
        .cookie(&cookie)
        .send(&w)
        .await?;
    ensure!(s == StatusCode::OK);
    // A form another site posts with the browser's cookie: no CSRF header, refused; the
    // computer keeps running.
    let stop = format!("/v1/computers/{alpha}/stop");
    let (s, _, v) = Raw::new(Method::POST, &stop)
        .cookie(&cookie)
        .header("origin", "http://evil.example")
        .form("x=1")
        .send(&w)
        .await?;
    ensure!(s == StatusCode::FORBIDDEN && code(&v) == "csrf", "{s} {v}");
    let (s, _, v) = Raw::new(Method::POST, &stop)
        .cookie(&cookie)
        .header("x-csrf-token", "not-the-token")
        .send(&w)
        .await?;
    ensure!(s == StatusCode::FORBIDDEN && code(&v) == "csrf", "{s} {v}");
    ensure!(w.show(&alpha).await?["state"] == "running");
    // Signing in from another site's page is refused, and so is a form.
    let (s, _, _) = Raw::new(Method::POST, "/console/session")
        .header("origin", "http://evil.example")
        .json(json!({"token": operator}))
        .send(&w)
        .await?;
    ensure!(s == StatusCode::FORBIDDEN);
    let (s, _, _) = Raw::new(Method::POST, "/console/session")
        .form(&format!("token={operator}"))
        .send(&w)
        .await?;
    ensure!(s == StatusCode::UNSUPPORTED_MEDIA_TYPE);
    // With its CSRF token, the session may act as its token does.
    let path = format!("/v1/computers/{alpha}/exec");
    let (s, _, _) = Raw::new(Method::POST, &path)
        .cookie(&cookie)
        .header("x-csrf-token", csrf.clone())
        .json(json!({"argv": ["true"]}))
        .send(&w)
        .await?;
    ensure!(s == StatusCode::OK, "exec under the session: {s}");

    // Revoking the token ends it and its sessions at once.
    let out = cli(&w, w.api_token(), &["token", "list", "--json"]).await?;
    let tokens: Value = serde_json::from_slice(&out.stdout)?;
    let op_id = tokens["tokens"]
        .as_array()
        .context("tokens")?
        .iter()
        .find(|t| t["name"] == "op")
        .and_then(|t| t["id"].as_str())
        .context("the operator's id")?
        .to_string();
    ensure!(!String::from_utf8_lossy(&out.stdout).contains(&operator));
    let out = cli(&w, w.api_token(), &["token", "revoke", &op_id]).await?;
    ensure!(out.status.success());
    let (s, _, _) = Raw::new(Method::GET, "/console/session")
        .cookie(&cookie)
        .send(&w)
        .await?;
    ensure!(s == StatusCode::UNAUTHORIZED);
    let (s, _, _) = Raw::new(Method::GET, "/v1/computers")
        .bearer(&operator)
        .send(&w)
        .await?;
    ensure!(s == StatusCode::UNAUTHORIZED);

    // Sign-out: the viewer's session cookie stops working everywhere.
    let (_, h, session) = Raw::new(Method::POST, "/console/session")
        .json(json!({"token": viewer}))
        .send(&w)
        .await?;
    let cookie = h
        .get(header::SET_COOKIE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .and_then(|p| p.strip_prefix("rakazo_session="))
        .context("viewer cookie")?
        .to_string();
    w.add_secret(&cookie);
    let csrf = session["csrf"].as_str().context("csrf")?.to_string();
    let (s, _, _) = Raw::new(Method::DELETE, "/console/session")
        .cookie(&cookie)
        .send(&w)
        .await?;
    ensure!(s == StatusCode::FORBIDDEN, "sign-out without CSRF");
    let (s, h, _) = Raw::new(Method::DELETE, "/console/session")
        .cookie(&cookie)
        .header("x-csrf-token", csrf)
        .send(&w)
        .await?;
    ensure!(s == StatusCode::NO_CONTENT);
    ensure!(h
        .get(header::SET_COOKIE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("Max-Age=0")));
    let (s, _, _) = Raw::new(Method::GET, "/v1/computers")
        .cookie(&cookie)
        .send(&w)
        .await?;
    ensure!(s == StatusCode::UNAUTHORIZED);

    // The console's page carries its policy.
    let (s, h, _) = Raw::new(Method::GET, "/console").send(&w).await?;
    ensure!(s == StatusCode::OK);
    let csp = h
        .get(header::CONTENT_SECURITY_POLICY)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    ensure!(
        csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    ensure!(h
        .get(header::CACHE_CONTROL)
        .is_some_and(|v| v == "no-store"));
    w.check_log()
}

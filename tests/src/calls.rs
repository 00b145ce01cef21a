//! What a test asks of a running control plane through its API: the [`World`]'s calls (exec,
//! files, screens, leases, homes) and the same for tasks that hold only a [`Client`].

use crate::World;
use anyhow::{anyhow, bail, Result};
use bytes::Bytes;
use control_plane::client::{full_body, q, Client, ClientError};
use control_plane::schema::home::{HomeRevision, HomeRevisions};
use http_body_util::BodyExt;
use hyper::Method;

impl World {
    /// The computer's `computer.lifecycle` events (its newest 200 activity events' worth),
    /// oldest first.
    pub async fn lifecycle(&self, computer: &str) -> Result<Vec<serde_json::Value>> {
        let page = self
            .client
            .json(
                Method::GET,
                &format!("/v1/computers/{}/activity?limit=200", q(computer)),
                None,
            )
            .await?;
        Ok(page["events"]
            .as_array()
            .ok_or_else(|| anyhow!("no events in {page}"))?
            .iter()
            .filter(|e| e["type"] == "computer.lifecycle")
            .cloned()
            .collect())
    }

    /// The computer as `GET /v1/computers/{id}` shows it.
    pub async fn show(&self, computer: &str) -> Result<serde_json::Value> {
        Ok(self
            .client
            .json(Method::GET, &format!("/v1/computers/{}", q(computer)), None)
            .await?)
    }

    /// The stored home's revision (`GET /v1/computers/{id}/home`); `None` before the first
    /// checkpoint.
    pub async fn home_revision(&self, computer: &str) -> Result<Option<u64>> {
        let v = self
            .client
            .json(
                Method::GET,
                &format!("/v1/computers/{}/home", q(computer)),
                None,
            )
            .await?;
        Ok(v["revision"].as_u64())
    }

    /// Runs a command; returns the NDJSON events.
    pub async fn exec(
        &self,
        computer: &str,
        spec: serde_json::Value,
    ) -> Result<ExecOutput, ClientError> {
        let path = format!("/v1/computers/{}/exec", q(computer));
        exec_via(&self.client, &path, &spec).await
    }

    /// Runs `sh -c script` on a computer; its stdout, or an error naming the exit code and
    /// stderr.
    pub async fn sh(&self, computer: &str, script: &str) -> Result<String> {
        let out = self
            .exec(
                computer,
                serde_json::json!({ "argv": ["sh", "-c", script] }),
            )
            .await?;
        if out.code != Some(0) {
            bail!(
                "`{script}` exited {:?}: {}",
                out.code,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    pub async fn put_file(
        &self,
        computer: &str,
        path: &str,
        bytes: Vec<u8>,
        executable: bool,
    ) -> Result<serde_json::Value, ClientError> {
        let len = bytes.len() as u64;
        let resp = self
            .client
            .send(
                Method::PUT,
                &format!(
                    "/v1/computers/{}/files/content?path={}&executable={executable}",
                    q(computer),
                    q(path)
                ),
                Some("application/octet-stream"),
                Some(len),
                full_body(bytes),
            )
            .await?;
        let b = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| ClientError::BadResponse(e.to_string()))?;
        serde_json::from_slice(&b.to_bytes()).map_err(|e| ClientError::BadResponse(e.to_string()))
    }

    pub async fn get_file(&self, computer: &str, path: &str) -> Result<Bytes, ClientError> {
        let resp = self
            .client
            .send(
                Method::GET,
                &format!(
                    "/v1/computers/{}/files/content?path={}",
                    q(computer),
                    q(path)
                ),
                None,
                None,
                full_body(Bytes::new()),
            )
            .await?;
        let b = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| ClientError::BadResponse(e.to_string()))?;
        Ok(b.to_bytes())
    }

    /// The home's revisions, oldest first (`GET /v1/computers/{id}/home/revisions`).
    pub async fn revisions(&self, computer: &str) -> Result<Vec<HomeRevision>, ClientError> {
        home_revisions(&self.client, computer).await
    }

    /// A JSON POST that must succeed.
    pub async fn post(
        &self,
        path: &str,
        body: serde_json::Value,
    ) -> Result<serde_json::Value, ClientError> {
        self.client.json(Method::POST, path, Some(&body)).await
    }

    /// `GET /v1/computers/{id}/screens`: the computer's live screens as the API lists them.
    pub async fn screens(&self, computer: &str) -> Result<serde_json::Value, ClientError> {
        self.client
            .json(
                Method::GET,
                &format!("/v1/computers/{computer}/screens"),
                None,
            )
            .await
    }

    /// The bots with a live screen on `computer`, in slot order.
    pub async fn screen_bots(&self, computer: &str) -> Result<Vec<String>> {
        let list = self.screens(computer).await?;
        Ok(list["screens"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["bot"].as_str().map(String::from))
            .collect())
    }

    /// A terminal capability URL's path (`/cap/<sealed>`) for `bot` (the user holds its
    /// control), recorded as a secret.
    pub async fn terminal_url(&mut self, computer: &str, bot: &str) -> Result<String> {
        let v = self
            .post(
                &format!("/v1/computers/{computer}/terminals/{bot}/url"),
                serde_json::json!({}),
            )
            .await?;
        let path = v["path"]
            .as_str()
            .ok_or_else(|| anyhow!("no path in {v}"))?
            .to_string();
        self.add_secret(path.trim_start_matches("/cap/"));
        Ok(path)
    }

    /// A capability URL's path (`/cap/<sealed>`) for `bot`'s desktop under `policy`; the caller
    /// records it as a secret.
    pub async fn screen_url(&self, computer: &str, bot: &str, policy: &str) -> Result<String> {
        let v = self
            .post(
                &format!("/v1/computers/{computer}/screens/{bot}/url"),
                serde_json::json!({ "policy": policy }),
            )
            .await?;
        Ok(v["path"]
            .as_str()
            .ok_or_else(|| anyhow!("no path in {v}"))?
            .to_string())
    }

    /// The run holding `lease` asks for a takeover (it waits for the user), and the user takes
    /// control of `bot`'s screen; returns the takeover's answer.
    pub async fn take_over_waiting_run(
        &self,
        computer: &str,
        bot: &str,
        lease: &str,
    ) -> Result<serde_json::Value> {
        self.post(
            &format!("/v1/computers/{computer}/leases/{bot}/waiting_takeover"),
            serde_json::json!({ "lease": lease }),
        )
        .await?;
        Ok(self
            .post(
                &format!("/v1/computers/{computer}/screens/{bot}/takeover"),
                serde_json::json!({}),
            )
            .await?)
    }

    /// Ends a takeover: the user releases control of `bot`'s screen, then the run holding
    /// `lease` ends with `outcome` (`success`, `failed`...).
    pub async fn end_takeover(
        &self,
        computer: &str,
        bot: &str,
        lease: &str,
        outcome: &str,
    ) -> Result<()> {
        self.post(
            &format!("/v1/computers/{computer}/screens/{bot}/release-control"),
            serde_json::json!({}),
        )
        .await?;
        self.post(
            &format!("/v1/computers/{computer}/leases/{bot}/release"),
            serde_json::json!({ "lease": lease, "outcome": outcome }),
        )
        .await?;
        Ok(())
    }

    /// Acquires `bot`'s execution lease for `owner`; returns the lease string.
    pub async fn lease(&self, computer: &str, bot: &str, owner: &str) -> Result<String> {
        let v = self
            .post(
                &format!("/v1/computers/{computer}/leases/{bot}/acquire"),
                serde_json::json!({ "owner": owner }),
            )
            .await?;
        Ok(v["lease"]
            .as_str()
            .ok_or_else(|| anyhow!("no lease in {v}"))?
            .to_string())
    }

    /// Runs `rakazo home checkpoint` or `restore` (`flow`) through the API; returns the NDJSON
    /// lines, the last being `done` or `error`.
    pub async fn home_flow(
        &self,
        computer: &str,
        flow: &str,
    ) -> Result<Vec<serde_json::Value>, ClientError> {
        let path = format!("/v1/computers/{}/home/{flow}", q(computer));
        post_ndjson(&self.client, &path).await
    }

    /// A checkpoint or restore that must succeed; returns its `done` line.
    pub async fn home_ok(&self, computer: &str, flow: &str) -> Result<serde_json::Value> {
        let lines = self.home_flow(computer, flow).await?;
        match lines.last() {
            Some(v) if v["type"] == "done" => Ok(v.clone()),
            other => bail!("home {flow} of {computer} failed: {other:?}"),
        }
    }
}

/// A home's revisions, oldest first (`GET /v1/computers/{id}/home/revisions`), through `client`:
/// for tasks that cannot borrow the [`World`].
pub async fn home_revisions(
    client: &Client,
    computer: &str,
) -> Result<Vec<HomeRevision>, ClientError> {
    let path = format!("/v1/computers/{}/home/revisions", q(computer));
    let list: HomeRevisions = client.fetch(Method::GET, &path).await?;
    Ok(list.revisions)
}

/// Runs a command through `client` (`path` = `/v1/computers/{id}/exec`): for tasks that
/// cannot borrow the [`World`].
pub async fn exec_via(
    client: &Client,
    path: &str,
    spec: &serde_json::Value,
) -> Result<ExecOutput, ClientError> {
    let resp = client
        .send(
            Method::POST,
            path,
            Some("application/json"),
            None,
            full_body(serde_json::to_vec(spec).unwrap_or_default()),
        )
        .await?;
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| ClientError::BadResponse(e.to_string()))?;
    Ok(ExecOutput::parse(&body.to_bytes()))
}

/// POSTs `path` with no body (a home checkpoint or restore); the NDJSON lines of the answer.
pub async fn post_ndjson(
    client: &Client,
    path: &str,
) -> Result<Vec<serde_json::Value>, ClientError> {
    let resp = client
        .send(Method::POST, path, None, None, full_body(Bytes::new()))
        .await?;
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| ClientError::BadResponse(e.to_string()))?
        .to_bytes();
    Ok(body
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap_or(serde_json::Value::Null))
        .collect())
}

/// The decoded events of an exec.
#[derive(Debug, Default)]
pub struct ExecOutput {
    pub events: Vec<serde_json::Value>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub code: Option<i64>,
    pub message: Option<String>,
    pub error: Option<serde_json::Value>,
}

impl ExecOutput {
    pub fn parse(body: &[u8]) -> Self {
        let mut out = ExecOutput::default();
        for line in body.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let v: serde_json::Value = serde_json::from_slice(line).unwrap_or_default();
            let data = || -> Vec<u8> {
                match (v["data"].as_str(), v["data_b64"].as_str()) {
                    (Some(t), _) => t.as_bytes().to_vec(),
                    (None, Some(b)) => {
                        use base64::Engine;
                        base64::engine::general_purpose::STANDARD
                            .decode(b)
                            .unwrap_or_default()
                    }
                    _ => Vec::new(),
                }
            };
            match v["type"].as_str() {
                Some("stdout") => out.stdout.extend(data()),
                Some("stderr") => out.stderr.extend(data()),
                Some("exit") => {
                    out.code = v["code"].as_i64();
                    out.message = v["message"].as_str().map(String::from);
                }
                Some("error") => out.error = Some(v.clone()),
                _ => {}
            }
            out.events.push(v);
        }
        out
    }
}

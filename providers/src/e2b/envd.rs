//! The daemon inside every E2B sandbox (envd): file upload through its REST API (`POST /files`,
//! `spec/envd/envd.yaml` version 0.1.3) and processes through Connect RPC in JSON
//! (`process.Process/Start`, `List` and `SendSignal` of `spec/envd/process/process.proto`).
//!
//! Every request names its sandbox and port (`E2b-Sandbox-Id`, `E2b-Sandbox-Port`, which route
//! it through a shared sandbox URL), carries the sandbox's envd access token (`X-Access-Token`)
//! and the user it acts as (`Authorization: Basic <user>:`). A started process outlives the
//! request that started it: envd keeps running a process whose client went away.

use crate::remote::http::{failure, multipart_file, query, unavailable, BaseUrl, Call, Http};
use crate::{ProviderError, Secret};
use base64::Engine;
use bytes::{Buf, Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{HeaderName, AUTHORIZATION};
use hyper::Method;
use std::collections::BTreeMap;
use std::time::Duration;

/// The port envd listens on in every sandbox.
pub const ENVD_PORT: u16 = 49983;
/// The largest Connect message read (process events are small).
const MAX_MESSAGE: usize = 1 << 20;
/// How much of a failed command's stderr is kept for the error message.
const MAX_STDERR: usize = 2048;

/// One sandbox's envd.
pub(crate) struct Envd<'a> {
    pub http: &'a Http,
    /// `https://49983-<sandbox>.<domain>`, or the shared sandbox URL.
    pub base: BaseUrl,
    pub sandbox_id: &'a str,
    pub access_token: Option<Secret>,
    /// Deadline of one call (an upload gets its own).
    pub call_timeout: Duration,
}

/// A process to start.
pub(crate) struct Process<'a> {
    pub user: &'a str,
    pub cmd: &'a str,
    pub args: Vec<String>,
    pub envs: BTreeMap<String, String>,
    pub cwd: Option<&'a str>,
    /// A tag `List` reports the process under, so it can be found and signalled later.
    pub tag: Option<&'a str>,
}

impl Envd<'_> {
    fn call(
        &self,
        method: Method,
        path: &str,
        user: &str,
        deadline: Duration,
        context: String,
    ) -> Result<Call, ProviderError> {
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("{user}:"));
        let mut call = Call::new(method, self.base.join(path), deadline, context)
            .header(HeaderName::from_static("e2b-sandbox-id"), self.sandbox_id)?
            .header(
                HeaderName::from_static("e2b-sandbox-port"),
                &ENVD_PORT.to_string(),
            )?
            .header(AUTHORIZATION, &format!("Basic {basic}"))?;
        if let Some(token) = &self.access_token {
            call = call.secret_header(HeaderName::from_static("x-access-token"), &token.0)?;
        }
        Ok(call)
    }

    /// Writes `content` to `path` as `user` (parents made as needed; an existing file is
    /// replaced). Returns the absolute path envd wrote.
    pub async fn upload(
        &self,
        user: &str,
        path: &str,
        content: Bytes,
        deadline: Duration,
    ) -> Result<String, ProviderError> {
        let context = format!("upload {path} into E2B sandbox {}", self.sandbox_id);
        let (content_type, body) = multipart_file("file", file_name(path), &content);
        let call = self
            .call(
                Method::POST,
                &format!("/files{}", query(&[("path", path), ("username", user)])),
                user,
                deadline,
                context.clone(),
            )?
            .body(&content_type, body)?;
        let answer = self.http.send(call).await?.success(&context, None)?;
        let entries: Vec<serde_json::Value> = answer.json(&context)?;
        Ok(entries
            .first()
            .and_then(|e| e["path"].as_str())
            .unwrap_or(path)
            .to_string())
    }

    /// Runs `cmd args` as `user` to its end; a non-zero exit is refused with its stderr.
    pub async fn run(&self, user: &str, cmd: &str, args: &[&str]) -> Result<(), ProviderError> {
        let context = format!(
            "run {cmd} {} in E2B sandbox {}",
            args.join(" "),
            self.sandbox_id
        );
        let process = Process {
            user,
            cmd,
            args: args.iter().map(|a| a.to_string()).collect(),
            envs: BTreeMap::new(),
            cwd: None,
            tag: None,
        };
        let deadline = tokio::time::Instant::now() + self.call_timeout;
        let mut events = self.open_start(&process, &context).await?;
        let mut stderr = Vec::new();
        loop {
            let Some(event) = events.next(deadline, &context).await? else {
                return Err(unavailable(
                    &context,
                    "the process stream ended before the process did".into(),
                ));
            };
            let event = &event["event"];
            if let Some(b64) = event["data"]["stderr"].as_str() {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .unwrap_or_default();
                let room = MAX_STDERR.saturating_sub(stderr.len());
                stderr.extend_from_slice(&bytes[..bytes.len().min(room)]);
            }
            let end = &event["end"];
            if end.is_object() {
                // proto3 JSON leaves out a zero exit code.
                let code = end["exitCode"].as_i64().unwrap_or(0);
                return if end["exited"].as_bool() == Some(true) && code == 0 {
                    Ok(())
                } else {
                    Err(ProviderError::BadSpec(format!(
                        "{context}: exited {code} ({}): {}",
                        end["status"].as_str().unwrap_or(""),
                        String::from_utf8_lossy(&stderr).trim()
                    )))
                };
            }
        }
    }

    /// Starts `process` and returns its pid once envd reports it started; the process runs on
    /// after this returns.
    pub async fn start(&self, process: &Process<'_>) -> Result<u32, ProviderError> {
        let context = format!("start {} in E2B sandbox {}", process.cmd, self.sandbox_id);
        let deadline = tokio::time::Instant::now() + self.call_timeout;
        let mut events = self.open_start(process, &context).await?;
        loop {
            let Some(event) = events.next(deadline, &context).await? else {
                return Err(unavailable(
                    &context,
                    "the process stream ended before the start event".into(),
                ));
            };
            if let Some(pid) = event["event"]["start"]["pid"].as_u64() {
                return u32::try_from(pid)
                    .map_err(|_| unavailable(&context, format!("envd answered pid {pid}")));
            }
            if event["event"]["end"].is_object() {
                return Err(ProviderError::BadSpec(format!(
                    "{context}: the process ended at once ({})",
                    event["event"]["end"]["status"].as_str().unwrap_or("")
                )));
            }
        }
    }

    async fn open_start(&self, p: &Process<'_>, context: &str) -> Result<Events, ProviderError> {
        let mut config = serde_json::json!({ "cmd": p.cmd, "args": p.args, "envs": p.envs });
        if let Some(cwd) = p.cwd {
            config["cwd"] = cwd.into();
        }
        let mut request = serde_json::json!({ "process": config, "stdin": false });
        if let Some(tag) = p.tag {
            request["tag"] = tag.into();
        }
        let call = self
            .call(
                Method::POST,
                "/process.Process/Start",
                p.user,
                self.call_timeout,
                context.to_string(),
            )?
            .header(HeaderName::from_static("connect-protocol-version"), "1")?
            .body(
                "application/connect+json",
                envelope(request.to_string().as_bytes()),
            )?;
        let (status, body) = self.http.open(call).await?;
        if !status.is_success() {
            let body = http_body_util::Limited::new(body, MAX_MESSAGE)
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            return Err(connect_failure(context, status, &body));
        }
        Ok(Events {
            body,
            buf: BytesMut::new(),
        })
    }

    /// Whether a process tagged `tag` runs.
    pub async fn tagged_running(&self, user: &str, tag: &str) -> Result<bool, ProviderError> {
        let context = format!("list the processes of E2B sandbox {}", self.sandbox_id);
        let v = self
            .unary(
                "/process.Process/List",
                user,
                serde_json::json!({}),
                &context,
            )
            .await?;
        Ok(v["processes"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|p| p["tag"].as_str() == Some(tag)))
    }

    /// Sends SIGTERM (`kill`: SIGKILL) to the process tagged `tag`; none is fine.
    pub async fn signal(&self, user: &str, tag: &str, kill: bool) -> Result<(), ProviderError> {
        let context = format!("signal {tag} in E2B sandbox {}", self.sandbox_id);
        let signal = if kill {
            "SIGNAL_SIGKILL"
        } else {
            "SIGNAL_SIGTERM"
        };
        let request = serde_json::json!({ "process": { "tag": tag }, "signal": signal });
        match self
            .unary("/process.Process/SendSignal", user, request, &context)
            .await
        {
            Ok(_) => Ok(()),
            Err(ProviderError::BadSpec(m)) if m.contains("not_found") => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn unary(
        &self,
        path: &str,
        user: &str,
        request: serde_json::Value,
        context: &str,
    ) -> Result<serde_json::Value, ProviderError> {
        let call = self
            .call(
                Method::POST,
                path,
                user,
                self.call_timeout,
                context.to_string(),
            )?
            .header(HeaderName::from_static("connect-protocol-version"), "1")?
            .json(&request);
        let answer = self.http.send(call).await?;
        if !answer.status.is_success() {
            return Err(connect_failure(context, answer.status, &answer.body));
        }
        answer.json(context)
    }
}

/// The last component of a path, for the multipart part's file name.
fn file_name(path: &str) -> &str {
    path.rsplit('/')
        .next()
        .filter(|n| !n.is_empty())
        .unwrap_or("file")
}

/// A Connect envelope: flags (0), big-endian length, message.
pub(crate) fn envelope(message: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(message.len() + 5);
    out.push(0);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    Bytes::from(out)
}

/// A Connect error (`{"code": "...", "message": "..."}`, in an error answer or an end-stream
/// message) sorted into our classes; without a Connect code, the HTTP status decides.
fn connect_failure(context: &str, status: hyper::StatusCode, body: &[u8]) -> ProviderError {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let error = if v["error"].is_object() {
        &v["error"]
    } else {
        &v
    };
    match error["code"].as_str() {
        Some(code) => connect_code(context, code, error["message"].as_str().unwrap_or("")),
        None => failure(context, status, body, None),
    }
}

fn connect_code(context: &str, code: &str, message: &str) -> ProviderError {
    let said = format!(
        "{context}: {code}: {}",
        crate::remote::http::message_of(message.as_bytes())
    );
    match code {
        "resource_exhausted" => ProviderError::Capacity(said),
        "invalid_argument"
        | "failed_precondition"
        | "permission_denied"
        | "unauthenticated"
        | "not_found"
        | "already_exists"
        | "out_of_range"
        | "unimplemented" => ProviderError::BadSpec(said),
        _ => unavailable(context, format!("{code}: {message}")),
    }
}

/// The messages of a Connect server stream.
struct Events {
    body: Incoming,
    buf: BytesMut,
}

impl Events {
    /// The next event, `None` at the end of the stream; an end-stream message with an error
    /// is that error. Waits until `deadline` at most.
    async fn next(
        &mut self,
        deadline: tokio::time::Instant,
        context: &str,
    ) -> Result<Option<serde_json::Value>, ProviderError> {
        loop {
            if let Some((flags, message)) = self.take(context)? {
                let v: serde_json::Value = serde_json::from_slice(&message).map_err(|e| {
                    unavailable(context, format!("envd sent a malformed message ({e})"))
                })?;
                if flags & 0x02 != 0 {
                    return match v["error"]["code"].as_str() {
                        Some(code) => Err(connect_code(
                            context,
                            code,
                            v["error"]["message"].as_str().unwrap_or(""),
                        )),
                        None => Ok(None),
                    };
                }
                return Ok(Some(v));
            }
            let frame = tokio::time::timeout_at(deadline, self.body.frame())
                .await
                .map_err(|_| unavailable(context, "envd did not answer in time".into()))?;
            match frame {
                None if self.buf.is_empty() => return Ok(None),
                None => return Err(unavailable(context, "the stream was cut short".into())),
                Some(Err(e)) => {
                    return Err(unavailable(context, format!("the stream failed: {e}")))
                }
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
            }
        }
    }

    /// One whole envelope from the buffer, if there is one.
    fn take(&mut self, context: &str) -> Result<Option<(u8, Bytes)>, ProviderError> {
        if self.buf.len() < 5 {
            return Ok(None);
        }
        let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
        if len > MAX_MESSAGE {
            return Err(unavailable(
                context,
                format!("envd sent a {len}-byte message"),
            ));
        }
        if self.buf.len() < 5 + len {
            return Ok(None);
        }
        let flags = self.buf[0];
        self.buf.advance(5);
        Ok(Some((flags, self.buf.split_to(len).freeze())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorClass;

    #[test]
    fn envelopes_carry_their_length() {
        let e = envelope(b"{}");
        assert_eq!(&e[..], &[0, 0, 0, 0, 2, b'{', b'}']);
    }

    #[test]
    fn connect_errors_map_to_classes() {
        let class =
            |body: &str| connect_failure("op", hyper::StatusCode::OK, body.as_bytes()).class();
        assert_eq!(
            class(r#"{"error":{"code":"resource_exhausted"}}"#),
            ErrorClass::Capacity
        );
        assert_eq!(
            class(r#"{"code":"permission_denied","message":"no"}"#),
            ErrorClass::Invalid
        );
        assert_eq!(class(r#"{"code":"unavailable"}"#), ErrorClass::Transient);
        assert_eq!(
            connect_failure("op", hyper::StatusCode::BAD_GATEWAY, b"<html>").class(),
            ErrorClass::Transient
        );
    }

    #[test]
    fn file_names_are_the_last_component() {
        assert_eq!(file_name("/etc/rakazo/enroll-token"), "enroll-token");
        assert_eq!(file_name("x"), "x");
        assert_eq!(file_name("/a/"), "file");
    }
}

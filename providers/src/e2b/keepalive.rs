//! Keeping in-use E2B sandboxes alive: E2B ends (here: pauses) a sandbox whose time to live
//! runs out, so while a computer is in use its adapter sets the sandbox's timeout again every
//! third of it (`POST /sandboxes/{id}/timeout`).
//!
//! A keepalive runs from the provision or start of a sandbox (or the first look that finds it
//! running, after a control-plane restart) until it is stopped or destroyed; it ends by itself
//! when E2B no longer knows the sandbox. A missed refresh costs nothing but the sandbox's
//! running state: it pauses, and the next start resumes it.

use crate::remote::http::{Call, Http};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::task::AbortHandle;
use tracing::{info, warn};

/// The running keepalives, by sandbox id.
#[derive(Default)]
pub(crate) struct Keepalives {
    tasks: Mutex<HashMap<String, AbortHandle>>,
}

impl Keepalives {
    /// Keeps `sandbox` alive: every `every`, sends the call `refresh` makes. A keepalive
    /// already running for it is left alone.
    pub fn start(
        &self,
        sandbox: &str,
        http: Http,
        every: Duration,
        refresh: impl Fn() -> Result<Call, crate::ProviderError> + Send + 'static,
    ) {
        let mut tasks = self.tasks.lock().expect("keepalives");
        tasks.retain(|_, t| !t.is_finished());
        if tasks.contains_key(sandbox) {
            return;
        }
        let id = sandbox.to_string();
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let answer = match refresh() {
                    Ok(call) => http.send(call).await,
                    Err(e) => Err(e),
                };
                match answer {
                    Ok(a) if a.status.is_success() => {}
                    Ok(a) if a.status == hyper::StatusCode::NOT_FOUND => {
                        info!(sandbox = %id, "E2B no longer runs the sandbox: its keepalive ends");
                        return;
                    }
                    Ok(a) => {
                        warn!(sandbox = %id, status = a.status.as_u16(), message = %crate::remote::http::message_of(&a.body), "E2B refused a sandbox timeout refresh")
                    }
                    Err(e) => {
                        warn!(sandbox = %id, error = %e, "E2B sandbox timeout refresh failed")
                    }
                }
            }
        });
        tasks.insert(sandbox.to_string(), task.abort_handle());
    }

    /// Ends the keepalive of `sandbox`, if any.
    pub fn stop(&self, sandbox: &str) {
        if let Some(t) = self.tasks.lock().expect("keepalives").remove(sandbox) {
            t.abort();
        }
    }
}

impl Drop for Keepalives {
    fn drop(&mut self) {
        if let Ok(tasks) = self.tasks.get_mut() {
            for (_, t) in tasks.drain() {
                t.abort();
            }
        }
    }
}

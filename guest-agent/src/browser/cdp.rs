//! The Chrome DevTools Protocol client: the one connection to a Chrome started with
//! `--remote-debugging-pipe`, and the browser lifecycle's few commands on it (readiness, opening
//! a tab, `Browser.close`, which flushes cookies and the session to disk).
//!
//! Transport: Chrome reads commands on its fd 3 and writes answers and events on its fd 4, each
//! message one JSON object followed by a NUL byte. Only the guest holds the other ends of those
//! pipes, so nothing else in the computer can reach DevTools (no port, no socket, no file). There
//! is exactly one connection per Chrome, shared by everything that talks to it: a
//! [`CdpClient`] is a cheap handle on it. One task writes (commands, in the order they were
//! sent), one task reads; command ids are ours, and each answer is routed to its caller by id.
//! Sessions are flat (`Target.attachToTarget` with `flatten: true`): a command names its session
//! with `sessionId`, and events are routed by their `sessionId` to whoever subscribed to those
//! methods of that session ([`CdpClient::subscribe`]). Events nobody subscribed to are dropped.
//!
//! Every call is bounded by a timeout. When Chrome's end closes (it exited, crashed or was
//! killed) every pending call fails at once with [`CdpError::Closed`], and so does every later
//! one.
//!
//! It leaves to others: starting Chrome with the pipes ([`super::Browser`]) and what the page
//! tools send ([`crate::pagebrowser`]).

use std::collections::HashMap;
use std::fmt::Debug;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::sync::{mpsc, oneshot};

/// The longest any one call here waits unless the caller gives its own bound.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest message read from Chrome. A bigger one is skipped whole (its caller, if any,
/// times out): nothing we ask for comes close.
pub const MAX_MESSAGE: usize = 64 * 1024 * 1024;

/// A CDP failure.
#[derive(Debug, thiserror::Error)]
pub enum CdpError {
    /// Chrome's end of the pipe is gone (the browser exited, crashed or was killed).
    #[error("the devtools connection to the browser is closed")]
    Closed,
    #[error("cdp {what} took longer than {timeout:?}")]
    Timeout {
        what: &'static str,
        timeout: Duration,
    },
    /// Chrome answered with a protocol error.
    #[error("cdp {what} failed: {message}")]
    Protocol {
        what: &'static str,
        code: i64,
        message: String,
    },
    #[error("cdp {what}: the command cannot be encoded")]
    Encode {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("cdp {what}: unexpected answer")]
    Decode {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

/// One event of a session, its parameters still unparsed.
#[derive(Debug)]
pub struct CdpEvent {
    pub method: String,
    pub params: Box<RawValue>,
}

impl CdpEvent {
    /// The parameters as `T`.
    pub fn params<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.params.get())
    }
}

/// A flat session on one target (a tab).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionId(String);

impl SessionId {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A handle on the one CDP connection of a Chrome. Clones share the connection.
#[derive(Clone)]
pub struct CdpClient {
    shared: Arc<Shared>,
}

impl Debug for CdpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CdpClient")
            .field("closed", &self.is_closed())
            .finish_non_exhaustive()
    }
}

struct Shared {
    /// Encoded messages, NUL included, to the writer task.
    outgoing: mpsc::UnboundedSender<Vec<u8>>,
    next_id: AtomicU64,
    /// Commands handed to the writer, for tests and benchmarks.
    sent: AtomicU64,
    state: Mutex<State>,
}

type Reply = Result<Box<RawValue>, RawError>;

#[derive(Default)]
struct State {
    closed: bool,
    pending: HashMap<u64, oneshot::Sender<Reply>>,
    subscribers: Vec<Subscriber>,
}

struct Subscriber {
    session: Option<SessionId>,
    methods: &'static [&'static str],
    tx: mpsc::UnboundedSender<CdpEvent>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain maps behind: still consistent.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Marks the connection closed and fails every pending call (their senders are dropped).
    fn close(&self) {
        let mut state = self.lock();
        state.closed = true;
        state.pending.clear();
        state.subscribers.clear();
    }
}

#[derive(Serialize)]
struct Outgoing<'a, P: ?Sized> {
    id: u64,
    method: &'a str,
    #[serde(rename = "sessionId", skip_serializing_if = "Option::is_none")]
    session_id: Option<&'a str>,
    params: &'a P,
}

#[derive(Deserialize)]
struct Incoming<'a> {
    #[serde(default)]
    id: Option<u64>,
    #[serde(default, borrow)]
    result: Option<&'a RawValue>,
    #[serde(default)]
    error: Option<RawError>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default, rename = "sessionId")]
    session_id: Option<String>,
    #[serde(default, borrow)]
    params: Option<&'a RawValue>,
}

#[derive(Debug, Deserialize)]
struct RawError {
    #[serde(default)]
    code: i64,
    #[serde(default)]
    message: String,
}

/// Removes a call's pending entry when the call ends for any reason (answered, timed out, or
/// its future dropped), so abandoned calls leave nothing behind.
struct PendingGuard<'a> {
    shared: &'a Shared,
    id: u64,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.shared.lock().pending.remove(&self.id);
    }
}

/// A command with no parameters.
#[derive(Debug, Serialize)]
pub struct NoParams {}

impl CdpClient {
    /// Takes over the guest's ends of Chrome's two pipes: `to_chrome` is the write end of the
    /// pipe Chrome reads as fd 3, `from_chrome` the read end of the one it writes as fd 4. Spawns
    /// the reader and writer tasks (so it needs a tokio runtime).
    pub fn from_pipes(to_chrome: OwnedFd, from_chrome: OwnedFd) -> std::io::Result<Self> {
        let writer = pipe::Sender::from_owned_fd(to_chrome)?;
        let reader = pipe::Receiver::from_owned_fd(from_chrome)?;
        let (outgoing, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            outgoing,
            next_id: AtomicU64::new(1),
            sent: AtomicU64::new(0),
            state: Mutex::new(State::default()),
        });
        tokio::spawn(write_loop(writer, rx, Arc::downgrade(&shared)));
        tokio::spawn(read_loop(reader, shared.clone()));
        Ok(Self { shared })
    }

    /// Whether Chrome's end has closed: every call fails with [`CdpError::Closed`] from now on.
    pub fn is_closed(&self) -> bool {
        self.shared.lock().closed
    }

    /// How many commands have been sent on this connection (by every handle), answered or not:
    /// what a caller's work costs in round trips to Chrome.
    pub fn commands_sent(&self) -> u64 {
        self.shared.sent.load(Ordering::Relaxed)
    }

    /// Whether `other` is a handle on the same connection (the same Chrome process).
    pub fn same_connection(&self, other: &CdpClient) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// Sends `method` with `params` (in `session`, else to the browser) and decodes the answer
    /// as `R`, waiting up to `timeout`.
    pub async fn call<P, R>(
        &self,
        method: &'static str,
        session: Option<&SessionId>,
        params: &P,
        timeout: Duration,
    ) -> Result<R, CdpError>
    where
        P: Serialize + ?Sized,
        R: DeserializeOwned,
    {
        let what = method;
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let message = encode(id, method, session, params)
            .map_err(|source| CdpError::Encode { what, source })?;
        let (tx, rx) = oneshot::channel();
        {
            let mut state = self.shared.lock();
            if state.closed {
                return Err(CdpError::Closed);
            }
            state.pending.insert(id, tx);
        }
        let _guard = PendingGuard {
            shared: &self.shared,
            id,
        };
        if self.shared.outgoing.send(message).is_err() {
            return Err(CdpError::Closed);
        }
        self.shared.sent.fetch_add(1, Ordering::Relaxed);
        let reply = match tokio::time::timeout(timeout, rx).await {
            Err(_elapsed) => return Err(CdpError::Timeout { what, timeout }),
            // The sender was dropped: the connection closed.
            Ok(Err(_)) => return Err(CdpError::Closed),
            Ok(Ok(reply)) => reply,
        };
        match reply {
            Ok(raw) => {
                serde_json::from_str(raw.get()).map_err(|source| CdpError::Decode { what, source })
            }
            Err(error) => Err(CdpError::Protocol {
                what,
                code: error.code,
                message: error.message,
            }),
        }
    }

    /// Sends `method` without waiting for (or keeping) its answer: for clean-ups such as
    /// detaching a session nobody uses any more.
    pub fn send<P: Serialize + ?Sized>(
        &self,
        method: &'static str,
        session: Option<&SessionId>,
        params: &P,
    ) -> Result<(), CdpError> {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let message = encode(id, method, session, params).map_err(|source| CdpError::Encode {
            what: method,
            source,
        })?;
        if self.is_closed() || self.shared.outgoing.send(message).is_err() {
            return Err(CdpError::Closed);
        }
        self.shared.sent.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Events `methods` of `session` (or of the browser, for `None`) from now on, until the
    /// receiver is dropped or the connection closes (then the receiver ends).
    pub fn subscribe(
        &self,
        session: Option<&SessionId>,
        methods: &'static [&'static str],
    ) -> mpsc::UnboundedReceiver<CdpEvent> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut state = self.shared.lock();
        // Subscribers whose receivers are gone are pruned here too, not only when events come.
        state.subscribers.retain(|s| !s.tx.is_closed());
        if !state.closed {
            state.subscribers.push(Subscriber {
                session: session.cloned(),
                methods,
                tx,
            });
        }
        rx
    }

    /// `Target.attachToTarget` with `flatten: true`: a session on `target_id`.
    pub async fn attach(&self, target_id: &str) -> Result<SessionId, CdpError> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Attach<'a> {
            target_id: &'a str,
            flatten: bool,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Attached {
            session_id: String,
        }
        let attached: Attached = self
            .call(
                "Target.attachToTarget",
                None,
                &Attach {
                    target_id,
                    flatten: true,
                },
                COMMAND_TIMEOUT,
            )
            .await?;
        Ok(SessionId(attached.session_id))
    }

    /// Detaches `session` without waiting for the answer (best effort).
    pub fn detach(&self, session: &SessionId) {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Detach<'a> {
            session_id: &'a str,
        }
        let _ = self.send(
            "Target.detachFromTarget",
            None,
            &Detach {
                session_id: session.as_str(),
            },
        );
    }

    /// `Browser.getVersion`: the product string (`Chrome/156.0.…`). Answers once Chrome's
    /// DevTools handler runs, so it doubles as the readiness check.
    pub async fn version(&self, timeout: Duration) -> Result<String, CdpError> {
        #[derive(Deserialize)]
        struct Version {
            product: String,
        }
        let v: Version = self
            .call("Browser.getVersion", None, &NoParams {}, timeout)
            .await?;
        Ok(v.product)
    }

    /// Opens `url` in a new tab and waits (up to [`COMMAND_TIMEOUT`]) for its load event;
    /// returns the tab's target id. A navigation Chrome refuses or fails (`net::ERR_…`) is a
    /// [`CdpError::Protocol`] naming Chrome's error.
    pub async fn open_tab(&self, url: &str) -> Result<String, CdpError> {
        let what = "open tab";
        let opened = async {
            // The tab starts blank so that the load can be watched from its very start.
            let target = self.create_target("about:blank").await?;
            let session = self.attach(&target).await?;
            let result = self.load_in(&session, url).await;
            self.detach(&session);
            result.map(|()| target)
        };
        match tokio::time::timeout(COMMAND_TIMEOUT, opened).await {
            Ok(result) => result,
            Err(_elapsed) => Err(CdpError::Timeout {
                what,
                timeout: COMMAND_TIMEOUT,
            }),
        }
    }

    /// `Target.createTarget`: a new tab showing `url`; its target id.
    pub async fn create_target(&self, url: &str) -> Result<String, CdpError> {
        #[derive(Serialize)]
        struct Create<'a> {
            url: &'a str,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Created {
            target_id: String,
        }
        let created: Created = self
            .call(
                "Target.createTarget",
                None,
                &Create { url },
                COMMAND_TIMEOUT,
            )
            .await?;
        Ok(created.target_id)
    }

    /// Navigates the session's tab to `url` and waits for that document's load event.
    async fn load_in(&self, session: &SessionId, url: &str) -> Result<(), CdpError> {
        #[derive(Serialize)]
        struct Enabled {
            enabled: bool,
        }
        #[derive(Serialize)]
        struct Navigate<'a> {
            url: &'a str,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Navigated {
            #[serde(default)]
            loader_id: Option<String>,
            #[serde(default)]
            error_text: Option<String>,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Lifecycle {
            loader_id: String,
            name: String,
        }
        let mut events = self.subscribe(Some(session), &["Page.lifecycleEvent"]);
        let t = COMMAND_TIMEOUT;
        self.call::<_, Empty>("Page.enable", Some(session), &NoParams {}, t)
            .await?;
        self.call::<_, Empty>(
            "Page.setLifecycleEventsEnabled",
            Some(session),
            &Enabled { enabled: true },
            t,
        )
        .await?;
        let navigated: Navigated = self
            .call("Page.navigate", Some(session), &Navigate { url }, t)
            .await?;
        if let Some(message) = navigated.error_text.filter(|e| !e.is_empty()) {
            return Err(CdpError::Protocol {
                what: "open tab",
                code: 0,
                message,
            });
        }
        let Some(loader) = navigated.loader_id else {
            // A same-document navigation loads nothing.
            return Ok(());
        };
        while let Some(event) = events.recv().await {
            match event.params::<Lifecycle>() {
                Ok(l) if l.name == "load" && l.loader_id == loader => return Ok(()),
                Ok(_) => {}
                Err(error) => tracing::debug!(%error, "unreadable lifecycle event"),
            }
        }
        Err(CdpError::Closed)
    }

    /// `Browser.close`: Chrome closes every window, saves its session and cookies, and exits.
    /// Returns once Chrome acknowledged the command (it may exit before answering, which reads
    /// as [`CdpError::Closed`]); the caller waits for the process.
    pub async fn close_browser(&self, timeout: Duration) -> Result<(), CdpError> {
        self.call::<_, Empty>("Browser.close", None, &NoParams {}, timeout)
            .await?;
        Ok(())
    }
}

/// A result with nothing we read in it.
#[derive(Debug, Deserialize)]
pub struct Empty {}

fn encode<P: Serialize + ?Sized>(
    id: u64,
    method: &str,
    session: Option<&SessionId>,
    params: &P,
) -> Result<Vec<u8>, serde_json::Error> {
    let mut message = serde_json::to_vec(&Outgoing {
        id,
        method,
        session_id: session.map(SessionId::as_str),
        params,
    })?;
    message.push(0);
    Ok(message)
}

/// Writes messages in order until the connection's last handle is gone or Chrome's end closes.
async fn write_loop(
    mut writer: pipe::Sender,
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
    shared: std::sync::Weak<Shared>,
) {
    while let Some(message) = rx.recv().await {
        if let Err(error) = writer.write_all(&message).await {
            tracing::debug!(%error, "cdp pipe closed for writing");
            if let Some(shared) = shared.upgrade() {
                shared.close();
            }
            return;
        }
    }
}

/// Reads NUL-terminated messages until Chrome's end closes, then fails everything pending.
async fn read_loop(mut reader: pipe::Receiver, shared: Arc<Shared>) {
    let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
    // Inside an oversized message: drop bytes until its NUL.
    let mut skipping = false;
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = match reader.read(&mut chunk).await {
            Ok(0) => break,
            Ok(n) => n,
            Err(error) => {
                tracing::debug!(%error, "cdp pipe read failed");
                break;
            }
        };
        let mut data = &chunk[..n];
        while let Some(end) = data.iter().position(|&b| b == 0) {
            if skipping {
                skipping = false;
            } else {
                buf.extend_from_slice(&data[..end]);
                dispatch(&shared, &buf);
            }
            buf.clear();
            data = &data[end + 1..];
        }
        if !skipping {
            buf.extend_from_slice(data);
            if buf.len() > MAX_MESSAGE {
                tracing::warn!(
                    limit = MAX_MESSAGE,
                    "skipping an oversized message from chrome"
                );
                buf.clear();
                buf.shrink_to(64 * 1024);
                skipping = true;
            }
        }
    }
    shared.close();
}

/// Routes one message: an answer to its caller, an event to its subscribers.
fn dispatch(shared: &Shared, message: &[u8]) {
    let incoming: Incoming<'_> = match serde_json::from_slice(message) {
        Ok(m) => m,
        Err(error) => {
            tracing::debug!(%error, "unreadable message from chrome");
            return;
        }
    };
    if let Some(id) = incoming.id {
        let reply = match (incoming.error, incoming.result) {
            (Some(error), _) => Err(error),
            (None, Some(result)) => Ok(result.to_owned()),
            (None, None) => RawValue::from_string("{}".to_owned()).map_err(|_| RawError {
                code: 0,
                message: "empty answer".to_owned(),
            }),
        };
        // No entry: the caller gave up (timeout) or never waited (`send`).
        if let Some(tx) = shared.lock().pending.remove(&id) {
            let _ = tx.send(reply);
        }
        return;
    }
    let Some(method) = incoming.method else {
        return;
    };
    let session = incoming.session_id.map(SessionId);
    let mut state = shared.lock();
    state.subscribers.retain(|s| !s.tx.is_closed());
    for s in &state.subscribers {
        if s.session == session && s.methods.contains(&method.as_str()) {
            let params = incoming.params.map_or_else(
                || RawValue::from_string("{}".to_owned()),
                |p| Ok(p.to_owned()),
            );
            if let Ok(params) = params {
                let _ = s.tx.send(CdpEvent {
                    method: method.clone(),
                    params,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// A fake Chrome end: the test reads what the client wrote and writes what Chrome would.
    fn pair() -> (CdpClient, std::fs::File, std::fs::File) {
        let (chrome_reads, to_chrome) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let (from_chrome, chrome_writes) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let client = CdpClient::from_pipes(to_chrome, from_chrome).unwrap();
        (
            client,
            std::fs::File::from(chrome_reads),
            std::fs::File::from(chrome_writes),
        )
    }

    /// Reads one NUL-terminated message (blocking; the test's side of the pipe).
    fn read_message(f: &mut std::fs::File) -> serde_json::Value {
        let mut out = Vec::new();
        let mut byte = [0u8; 1];
        loop {
            f.read_exact(&mut byte).unwrap();
            if byte[0] == 0 {
                return serde_json::from_slice(&out).unwrap();
            }
            out.push(byte[0]);
        }
    }

    #[tokio::test]
    async fn answers_go_to_their_callers_by_id_and_events_by_session() {
        let (client, mut chrome_in, mut chrome_out) = pair();
        let mut events = client.subscribe(Some(&SessionId("S1".into())), &["Page.frameNavigated"]);
        let c1 = client.clone();
        let first = tokio::spawn(async move {
            c1.call::<_, serde_json::Value>("A.one", None, &NoParams {}, COMMAND_TIMEOUT)
                .await
        });
        let c2 = client.clone();
        let second = tokio::spawn(async move {
            c2.call::<_, serde_json::Value>(
                "B.two",
                Some(&SessionId("S1".into())),
                &serde_json::json!({"x": 1}),
                COMMAND_TIMEOUT,
            )
            .await
        });
        let (a, b) = tokio::task::spawn_blocking(move || {
            let a = read_message(&mut chrome_in);
            let b = read_message(&mut chrome_in);
            (a, b, chrome_in)
        })
        .await
        .map(|(a, b, _)| (a, b))
        .unwrap();
        let (one, two) = if a["method"] == "A.one" {
            (a, b)
        } else {
            (b, a)
        };
        assert_eq!(two["sessionId"], "S1");
        assert_eq!(two["params"]["x"], 1);
        assert!(one.get("sessionId").is_none());
        // Answer out of order, with an event of another session and one of ours in between.
        let out = format!(
            "{{\"id\":{},\"result\":{{\"n\":2}},\"sessionId\":\"S1\"}}\0\
             {{\"method\":\"Page.frameNavigated\",\"sessionId\":\"S2\",\"params\":{{\"k\":0}}}}\0\
             {{\"method\":\"Page.frameNavigated\",\"sessionId\":\"S1\",\"params\":{{\"k\":1}}}}\0\
             {{\"id\":{},\"error\":{{\"code\":-32000,\"message\":\"nope\"}}}}\0",
            two["id"], one["id"]
        );
        chrome_out.write_all(out.as_bytes()).unwrap();
        let second = second.await.unwrap().unwrap();
        assert_eq!(second["n"], 2);
        let first = first.await.unwrap().unwrap_err();
        assert!(
            matches!(&first, CdpError::Protocol { code: -32000, message, .. } if message == "nope"),
            "{first:?}"
        );
        let event = events.recv().await.unwrap();
        assert_eq!(event.method, "Page.frameNavigated");
        assert_eq!(event.params::<serde_json::Value>().unwrap()["k"], 1);
        assert!(
            events.try_recv().is_err(),
            "the other session's event is not ours"
        );
    }

    #[tokio::test]
    async fn a_closed_pipe_fails_pending_and_later_calls_at_once() {
        let (client, chrome_in, chrome_out) = pair();
        let c = client.clone();
        let pending = tokio::spawn(async move {
            c.call::<_, Empty>("X.wait", None, &NoParams {}, Duration::from_secs(600))
                .await
        });
        // Let the call register, then Chrome "exits".
        while client.shared.lock().pending.is_empty() {
            tokio::task::yield_now().await;
        }
        drop((chrome_in, chrome_out));
        let error = pending.await.unwrap().unwrap_err();
        assert!(matches!(error, CdpError::Closed), "{error:?}");
        assert_eq!(
            error.to_string(),
            "the devtools connection to the browser is closed"
        );
        assert!(client.is_closed());
        let later = client
            .call::<_, Empty>("X.later", None, &NoParams {}, COMMAND_TIMEOUT)
            .await
            .unwrap_err();
        assert!(matches!(later, CdpError::Closed), "{later:?}");
    }

    #[tokio::test]
    async fn unanswered_calls_time_out_and_leave_nothing_pending() {
        let (client, _chrome_in, _chrome_out) = pair();
        let error = client
            .call::<_, Empty>("X.slow", None, &NoParams {}, Duration::from_millis(20))
            .await
            .unwrap_err();
        assert!(
            matches!(error, CdpError::Timeout { what: "X.slow", .. }),
            "{error:?}"
        );
        assert!(client.shared.lock().pending.is_empty());
    }
}

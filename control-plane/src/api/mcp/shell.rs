//! What MCP's `shell` tool gathers of a command, through the one exec pump
//! (`api::exec::pump`): the last [`SHELL_OUTPUT_MAX`] bytes of each output stream and its exit,
//! as the text the model reads.

use crate::activity::{ExecOutcome, Tail};
use crate::api::exec::Stdin;
use crate::api::{self, ApiError};
use crate::guest::Exec;
use crate::schema::code::ApiCode;
use bytes::Bytes;
use gateway_proto::ExecEvent;
use rmcp::model::{CallToolResult, ContentBlock};

/// Most of each output stream `shell` returns: the last bytes, with a note of what was cut.
pub const SHELL_OUTPUT_MAX: usize = 64 * 1024;

/// The kept tail `buf` of a stream of `total` bytes as text, saying how many came before.
fn tail_text(buf: &[u8], total: u64) -> String {
    let cut = total.saturating_sub(buf.len() as u64);
    let text = String::from_utf8_lossy(buf);
    if cut == 0 {
        text.into_owned()
    } else {
        format!("[first {cut} bytes omitted]\n{text}")
    }
}

/// Keeps the last [`SHELL_OUTPUT_MAX`] bytes of a stream.
#[derive(Default)]
struct Kept {
    buf: Vec<u8>,
    total: u64,
}

impl Kept {
    fn push(&mut self, b: &[u8]) {
        self.total += b.len() as u64;
        self.buf.extend_from_slice(b);
        if self.buf.len() > SHELL_OUTPUT_MAX {
            let drop = self.buf.len() - SHELL_OUTPUT_MAX;
            self.buf.drain(..drop);
        }
    }

    fn text(&self) -> String {
        tail_text(&self.buf, self.total)
    }
}

/// What `shell` gathers of a command: the tails of its output and how it exited.
#[derive(Default)]
struct Gathered {
    out: Kept,
    err: Kept,
    exit: Option<(i32, Option<String>)>,
}

impl api::exec::Sink for &mut Gathered {
    async fn event(&mut self, ev: &ExecEvent) -> bool {
        match ev {
            ExecEvent::Stdout(b) => self.out.push(b),
            ExecEvent::Stderr(b) => self.err.push(b),
            ExecEvent::Exit { code, message } => self.exit = Some((*code, message.clone())),
            _ => {}
        }
        true
    }

    async fn failed(&mut self, _: &ApiError) {}

    async fn closed(&self) {
        // The tool call waits for its answer: it never leaves.
        std::future::pending().await
    }
}

/// Feeds `stdin` to a started command and gathers its output until it exits, through the one
/// exec pump (`api::exec::pump`): the feed's outcome, and the tool's answer or refusal.
pub(super) async fn collect(
    exec: Exec,
    stdin: Option<Bytes>,
    tail: &mut Tail,
) -> Result<(ExecOutcome, CallToolResult), (ExecOutcome, ApiError)> {
    let stdin = match stdin {
        Some(bytes) => Stdin::Text(bytes),
        None => Stdin::None,
    };
    let mut gathered = Gathered::default();
    let pumped = api::exec::pump(exec, stdin, &mut gathered, tail).await;
    if let Some(e) = pumped.failure {
        return Err((pumped.outcome, e));
    }
    let Some((code, message)) = gathered.exit else {
        let mut e = ApiError::new(
            ApiCode::TunnelLost,
            "the command ended without an exit status",
        );
        e.uncertain = true;
        return Err((pumped.outcome, e));
    };
    let mut text = format!("exit code: {code}\n");
    if let Some(m) = &message {
        text.push_str(&format!("message: {m}\n"));
    }
    let (out, err) = (gathered.out.text(), gathered.err.text());
    text.push_str(&format!("stdout:\n{out}\nstderr:\n{err}"));
    Ok((
        pumped.outcome,
        CallToolResult::success(vec![ContentBlock::text(text)]),
    ))
}

//! A hostile guest for system tests: it authenticates exactly like `rakazo-guest` and then
//! stalls, so tests can show that nothing a guest does (or fails to do) holds the control plane.
//!
//! Started by the local provider in place of the real guest (`WorldOptions::guest_bin`), it
//! decides per computer: a computer whose directory (the parent of `RAKAZO_HOME`) holds a
//! `rogue-mode` file stalls; so does the first computer to start while the local root holds a
//! `rogue-next` file (it takes the file: renamed to its own `rogue-mode`). Every other computer
//! gets the real guest, `exec`ed in this process with the same environment and arguments.
//!
//! A stalled guest reads its configuration as the real one does (enrollment token from
//! `RAKAZO_ENROLL_TOKEN_FILE`), dials, says hello, answers pings on the control stream (so the
//! control plane's lease sync and keepalives pass) and accepts every operation stream without
//! ever answering it. A home export is the exception: it gets an `ExportStart` and the first
//! bytes of an archive, then silence (a guest that answers, then goes quiet). Streams are held
//! open until the connection ends; the guest dials again when it does.

use anyhow::{anyhow, Context, Result};
use gateway_proto::home::ExportStart;
use gateway_proto::{
    encode, AgentHandshake, AgentOutcome, ControlMsg, FrameDecoder, Reply, Request,
};
use guest_agent::config::{Config, ConfigSource, Env};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The mode file in a computer's directory.
const MODE_FILE: &str = "rogue-mode";
/// The file in the local root that the next computer to start takes.
const NEXT_FILE: &str = "rogue-next";

fn main() {
    let home = Env.get("RAKAZO_HOME").map(PathBuf::from);
    if !home.as_deref().is_some_and(stalls) {
        let real = tests::bin_dir().join("rakazo-guest");
        let err = std::process::Command::new(&real)
            .args(std::env::args_os().skip(1))
            .exec();
        eprintln!("rogue_guest: cannot exec {}: {err}", real.display());
        std::process::exit(2);
    }
    if let Err(e) = stall() {
        eprintln!("rogue_guest: {e:#}");
        std::process::exit(1);
    }
}

/// Whether the computer whose home is `home` is to stall (taking `rogue-next` if there is one).
fn stalls(home: &Path) -> bool {
    let Some(dir) = home.parent() else {
        return false;
    };
    let mode = dir.join(MODE_FILE);
    if mode.exists() {
        return true;
    }
    match dir.parent() {
        // Rename is atomic: of two guests starting at once, one takes it.
        Some(root) => std::fs::rename(root.join(NEXT_FILE), &mode).is_ok(),
        None => false,
    }
}

fn stall() -> Result<()> {
    let config = Config::from_source(&Env).map_err(|e| anyhow!("config: {e}"))?;
    if let Some(path) = &config.token_file {
        let _ = std::fs::remove_file(path);
    }
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        let mut endpoint = quinn::Endpoint::client("0.0.0.0:0".parse()?)?;
        endpoint.set_default_client_config(guest_agent::tunnel::client_config(config.cert_sha256)?);
        loop {
            if let Err(e) = session(&endpoint, &config).await {
                eprintln!("rogue_guest: session ended: {e:#}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
}

async fn session(endpoint: &quinn::Endpoint, config: &Config) -> Result<()> {
    let conn = endpoint
        .connect(config.control_addr, "rakazo-control-plane")?
        .await?;
    let (mut send, mut recv) = conn.open_bi().await?;
    let (mut hs, hello) = AgentHandshake::start(
        config.computer_id.clone(),
        config.token.clone(),
        "rogue_guest (tests)".into(),
    )
    .map_err(|e| anyhow!("hello: {e}"))?;
    send.write_all(&hello).await?;
    let outcome = loop {
        let chunk = recv
            .read_chunk(4096, true)
            .await?
            .context("control stream ended during hello")?;
        if let Some(outcome) = hs
            .handle_bytes(&chunk.bytes)
            .map_err(|e| anyhow!("hello reply: {e}"))?
        {
            break outcome;
        }
    };
    if let AgentOutcome::Refused(reason) = outcome {
        return Err(anyhow!("refused: {reason}"));
    }
    eprintln!("rogue_guest: connected as {}; stalling", config.computer_id);
    let mut decoder = FrameDecoder::with_max(64 * 1024);
    decoder.push(&hs.into_remainder());
    tokio::spawn(async move {
        // Pings are answered (the control plane's lease sync waits for its pong); leases are
        // taken and ignored.
        loop {
            while let Ok(Some(msg)) = decoder.next_message::<ControlMsg>() {
                if let ControlMsg::Ping { seq } = msg {
                    let Ok(frame) = encode(&ControlMsg::Pong { seq }) else {
                        return;
                    };
                    if send.write_all(&frame).await.is_err() {
                        return;
                    }
                }
            }
            match recv.read_chunk(64 * 1024, true).await {
                Ok(Some(chunk)) => decoder.push(&chunk.bytes),
                _ => return,
            }
        }
    });
    loop {
        let (send, recv) = conn.accept_bi().await?;
        tokio::spawn(hold(send, recv));
    }
}

/// Reads the request, answers a home export's first frame and a few archive bytes, then keeps
/// the stream open without a word.
async fn hold(mut send: quinn::SendStream, mut recv: quinn::RecvStream) {
    let mut decoder = FrameDecoder::new();
    let request = loop {
        if let Ok(Some(req)) = decoder.next_message::<Request>() {
            break req;
        }
        match recv.read_chunk(64 * 1024, true).await {
            Ok(Some(chunk)) => decoder.push(&chunk.bytes),
            _ => return,
        }
    };
    if let Request::HomeExport(_) = request {
        let start = Reply::ExportStart(ExportStart {
            content_bytes: 1 << 20,
            entries: 2,
        });
        if let Ok(frame) = encode(&start) {
            let _ = send.write_all(&frame).await;
            // The archive's magic and version: a start, then nothing more.
            let _ = send.write_all(&homes::archive::MAGIC).await;
            let _ = send.write_all(&homes::archive::VERSION.to_be_bytes()).await;
        }
    }
    // Held open for good: dropping the send half would finish it, which is an answer.
    let _held = (send, recv);
    std::future::pending::<()>().await;
}

//! One exec operation stream: decodes [`ExecInput`] frames from the control plane into the
//! command's input channel and writes its [`ExecEvent`]s back as frames, around [`super::run`]
//! (which knows nothing about QUIC or frames).

use crate::home::Home;
use crate::opstream::write_frame;
use gateway_proto::{ExecEvent, ExecInput, FrameDecoder, MAX_CHUNK};
use tokio::sync::mpsc;
use tracing::warn;

/// Serves the exec stream of `req` (its first input frames, if any, in `remainder`) to its end.
pub async fn serve(
    home: &Home,
    running: &std::sync::Arc<super::Running>,
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    remainder: Vec<u8>,
    req: gateway_proto::ExecRequest,
) {
    let (input_tx, input_rx) = mpsc::channel::<ExecInput>(16);
    let (event_tx, mut event_rx) = mpsc::channel::<ExecEvent>(64);
    // Input pump: frames from the control plane to the command. When the stream is reset
    // (the client went away) or the connection drops, the sender is dropped: exec aborts.
    let pump = tokio::spawn(async move {
        let mut decoder = FrameDecoder::with_max(MAX_CHUNK + 1024);
        decoder.push(&remainder);
        loop {
            loop {
                match decoder.next_message::<ExecInput>() {
                    Ok(Some(input)) => {
                        if input_tx.send(input).await.is_err() {
                            return;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        warn!(error = %e, "malformed exec input; aborting the command");
                        let _ = input_tx.send(ExecInput::Abort).await;
                        return;
                    }
                }
            }
            match recv.read_chunk(64 * 1024, true).await {
                Ok(Some(chunk)) => decoder.push(&chunk.bytes),
                // A clean finish means "no more input"; the command keeps running.
                Ok(None) => {
                    let _ = input_tx.send(ExecInput::CloseStdin).await;
                    input_tx.closed().await;
                    return;
                }
                Err(_) => {
                    let _ = input_tx.send(ExecInput::Abort).await;
                    return;
                }
            }
        }
    });
    let writer = async {
        while let Some(event) = event_rx.recv().await {
            if write_frame(&mut send, &event).await.is_err() {
                // Nobody is listening any more; dropping the receiver aborts the command.
                return;
            }
        }
        let _ = send.finish();
    };
    tokio::join!(super::run(home, running, req, input_rx, event_tx), writer);
    pump.abort();
}

//! Screenshots and batches of actions: a typed answer, then (when asked) an observation's PNG.

use super::raw::{next_exact, ByteError};
use super::Guest;
use crate::tunnel::{OpReceiver, TunnelError};
use gateway_proto::desktop::{
    ActOutcome, ActRequest, FrameKind, ObservationMeta, ObserveRequest, MAX_MARKS, MAX_REGIONS,
};
use gateway_proto::Reply;

/// Largest PNG accepted from a guest (a 1280x800 desktop is far below this).
const MAX_PNG: u64 = 32 << 20;
/// Raw bytes read at once.
const PNG_CHUNK: usize = 256 * 1024;

/// A screenshot: what the guest says about it, and its PNG (empty when `meta.unchanged`).
pub struct Observation {
    pub meta: ObservationMeta,
    pub png: Vec<u8>,
}

impl Guest {
    /// Takes a screenshot of the bot's desktop.
    pub async fn observe(&self, req: ObserveRequest) -> Result<Observation, TunnelError> {
        let mut op = self.open(req).await?;
        self.observation(&mut op.rx).await
    }

    /// Runs a batch of actions; with `observe`, the screenshot taken after it.
    pub async fn act(
        &self,
        req: ActRequest,
    ) -> Result<(ActOutcome, Option<Observation>), TunnelError> {
        let observe = req.observe;
        let mut op = self.open(req).await?;
        let outcome = self.answer::<ActRequest>(&mut op.rx).await?;
        let observation = match observe {
            true => Some(self.observation(&mut op.rx).await?),
            false => None,
        };
        Ok((outcome, observation))
    }

    /// Reads an observation: its meta frame (answered as an observe's is), then its PNG. A PNG
    /// over [`MAX_PNG`], one announced for an unchanged screen, regions whose lengths do not
    /// add up to the bytes announced, too many regions or marks, or more bytes than announced
    /// are protocol errors.
    async fn observation(&self, rx: &mut OpReceiver) -> Result<Observation, TunnelError> {
        let meta = self.answer::<ObserveRequest>(rx).await?;
        if !consistent(&meta) {
            return Err(self.protocol(Reply::Observation(meta)));
        }
        rx.start_raw();
        let mut png = Vec::with_capacity(meta.png_len as usize);
        let mut left = meta.png_len;
        loop {
            match next_exact(rx, self.computer(), &mut left, PNG_CHUNK).await {
                Ok(Some(piece)) => png.extend_from_slice(&piece),
                Ok(None) => return Ok(Observation { meta, png }),
                Err(ByteError::Overrun) => return Err(self.protocol(Reply::Observation(meta))),
                Err(ByteError::Tunnel(e)) => return Err(e),
            }
        }
    }
}

/// Whether an observation's metadata holds together (the guest is not trusted to say so).
fn consistent(meta: &ObservationMeta) -> bool {
    let regions_len = meta
        .regions
        .iter()
        .try_fold(0u64, |sum, r| sum.checked_add(r.png_len));
    let kind_ok = match meta.kind {
        FrameKind::Unchanged => meta.unchanged && meta.png_len == 0 && meta.regions.is_empty(),
        FrameKind::Full => !meta.unchanged && meta.regions.is_empty(),
        FrameKind::Regions => {
            !meta.unchanged
                && !meta.regions.is_empty()
                && meta.regions.len() <= MAX_REGIONS
                && regions_len == Some(meta.png_len)
                && meta.base_frame_id.is_some()
        }
    };
    kind_ok
        && meta.png_len <= MAX_PNG
        && meta
            .marks
            .as_ref()
            .is_none_or(|m| m.items.len() <= MAX_MARKS)
}

/// Largest recording reply accepted: a pull's bytes plus one record that may exceed them.
const MAX_RECORDING: u64 = gateway_proto::recording::MAX_PULL_BYTES as u64
    + gateway_proto::recording::MAX_BODY as u64
    + gateway_proto::recording::MAX_HEADER as u64
    + 8;

impl Guest {
    /// Takes what the bot's recorder recorded since `req.after` (docs/recordings.md). The bytes
    /// are the guest's: the caller checks them as records.
    pub async fn recording_pull(
        &self,
        req: gateway_proto::recording::RecordingPull,
    ) -> Result<(gateway_proto::recording::RecordingChunk, Vec<u8>), TunnelError> {
        use gateway_proto::recording::RecordingPull;
        let mut op = self.open(req).await?;
        let chunk = self.answer::<RecordingPull>(&mut op.rx).await?;
        if chunk.len > MAX_RECORDING || chunk.next < chunk.first {
            return Err(self.protocol(Reply::Recording(chunk)));
        }
        op.rx.start_raw();
        let mut bytes = Vec::with_capacity(usize::try_from(chunk.len).unwrap_or(0));
        let mut left = chunk.len;
        loop {
            match next_exact(&mut op.rx, self.computer(), &mut left, PNG_CHUNK).await {
                Ok(Some(piece)) => bytes.extend_from_slice(&piece),
                Ok(None) => return Ok((chunk, bytes)),
                Err(ByteError::Overrun) => return Err(self.protocol(Reply::Recording(chunk))),
                Err(ByteError::Tunnel(e)) => return Err(e),
            }
        }
    }
}

//! The hello/welcome handshake on the control stream, as two small sans-IO state machines.
//!
//! [`AgentHandshake`] is the guest's end: it produces the hello frame and interprets the reply.
//! [`ControlHandshake`] is the control plane's end: it decodes the hello, negotiates the version
//! and hands the credentials to its driver ([`HandshakeEvent::Authenticate`]), which checks them
//! against its database and calls [`ControlHandshake::accept`] or [`ControlHandshake::refuse`].
//! Neither touches a socket or a clock.

use crate::frame::{encode, FrameDecoder, FrameError};
use crate::msg::{Hello, HelloReply, RefuseReason, Refused, Welcome};
use crate::{MIN_PROTOCOL_VERSION, PROTOCOL_VERSION};

pub use crate::secret::Secret;

/// The hello frame is small; anything bigger is garbage.
pub const MAX_HELLO_LEN: usize = 4096;

/// Picks the version both ends speak, or says why there is none.
pub fn negotiate(hello: &Hello) -> Result<u16, RefuseReason> {
    let version = hello.version.min(PROTOCOL_VERSION);
    if hello.min_version > hello.version || version < hello.min_version.max(MIN_PROTOCOL_VERSION) {
        return Err(RefuseReason::UnsupportedVersion {
            min: MIN_PROTOCOL_VERSION,
            max: PROTOCOL_VERSION,
        });
    }
    Ok(version)
}

/// What the control-plane handshake asks of its driver.
#[derive(Debug, PartialEq, Eq)]
pub enum HandshakeEvent {
    /// Check these credentials, then call `accept` or `refuse`.
    Authenticate {
        computer_id: String,
        token: Secret,
        agent: String,
    },
    /// The handshake failed; send the pending frame (if any), then close with this reason.
    Failed(RefuseReason),
}

#[derive(Debug, PartialEq, Eq)]
enum State {
    AwaitHello,
    AwaitAuth { version: u16 },
    Done,
}

/// The control plane's end of the handshake.
#[derive(Debug)]
pub struct ControlHandshake {
    decoder: FrameDecoder,
    state: State,
    transmit: Vec<Vec<u8>>,
    version: Option<u16>,
}

impl Default for ControlHandshake {
    fn default() -> Self {
        Self::new()
    }
}

impl ControlHandshake {
    pub fn new() -> Self {
        Self {
            decoder: FrameDecoder::with_max(MAX_HELLO_LEN),
            state: State::AwaitHello,
            transmit: Vec::new(),
            version: None,
        }
    }

    /// Feeds bytes from the control stream. Returns an event once the hello is complete.
    pub fn handle_bytes(&mut self, bytes: &[u8]) -> Option<HandshakeEvent> {
        if self.state != State::AwaitHello {
            return None;
        }
        self.decoder.push(bytes);
        match self.decoder.next_message::<Hello>() {
            Ok(None) => None,
            Ok(Some(hello)) => match negotiate(&hello) {
                Ok(version) => {
                    self.state = State::AwaitAuth { version };
                    Some(HandshakeEvent::Authenticate {
                        computer_id: hello.computer_id,
                        token: hello.token,
                        agent: hello.agent,
                    })
                }
                Err(reason) => Some(self.fail(reason)),
            },
            Err(_) => Some(self.fail(RefuseReason::Malformed)),
        }
    }

    /// The stream ended before a hello arrived.
    pub fn handle_eof(&mut self) -> Option<HandshakeEvent> {
        (self.state == State::AwaitHello).then(|| {
            self.state = State::Done;
            HandshakeEvent::Failed(RefuseReason::Malformed)
        })
    }

    fn fail(&mut self, reason: RefuseReason) -> HandshakeEvent {
        self.queue(HelloReply::Refused(Refused { reason }));
        self.state = State::Done;
        HandshakeEvent::Failed(reason)
    }

    fn queue(&mut self, reply: HelloReply) {
        // A reply is a few bytes; encoding cannot exceed the frame limit.
        if let Ok(frame) = encode(&reply) {
            self.transmit.push(frame);
        }
    }

    /// The driver accepted the credentials.
    pub fn accept(&mut self) {
        if let State::AwaitAuth { version } = self.state {
            self.queue(HelloReply::Welcome(Welcome { version }));
            self.version = Some(version);
            self.state = State::Done;
        }
    }

    /// The driver refused the credentials.
    pub fn refuse(&mut self, reason: RefuseReason) {
        if matches!(self.state, State::AwaitAuth { .. }) {
            self.fail(reason);
        }
    }

    /// Frames to write to the control stream, in order.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        (!self.transmit.is_empty()).then(|| self.transmit.remove(0))
    }

    /// The negotiated version, once accepted.
    pub fn version(&self) -> Option<u16> {
        self.version
    }

    /// Bytes the guest sent after its hello (the start of the control-message stream).
    pub fn into_remainder(self) -> Vec<u8> {
        self.decoder.into_remainder()
    }
}

/// The guest's end of the handshake.
#[derive(Debug)]
pub struct AgentHandshake {
    decoder: FrameDecoder,
}

/// How the control plane answered.
#[derive(Debug, PartialEq, Eq)]
pub enum AgentOutcome {
    Welcome { version: u16 },
    Refused(RefuseReason),
}

impl AgentHandshake {
    /// Starts a handshake; returns the machine and the hello frame to send.
    pub fn start(
        computer_id: String,
        token: Secret,
        agent: String,
    ) -> Result<(Self, Vec<u8>), FrameError> {
        let hello = Hello {
            version: PROTOCOL_VERSION,
            min_version: MIN_PROTOCOL_VERSION,
            computer_id,
            token,
            agent,
        };
        let frame = encode(&hello)?;
        Ok((
            Self {
                decoder: FrameDecoder::with_max(MAX_HELLO_LEN),
            },
            frame,
        ))
    }

    /// Feeds reply bytes; returns the outcome once the reply is complete.
    pub fn handle_bytes(&mut self, bytes: &[u8]) -> Result<Option<AgentOutcome>, FrameError> {
        self.decoder.push(bytes);
        Ok(self
            .decoder
            .next_message::<HelloReply>()?
            .map(|reply| match reply {
                HelloReply::Welcome(w) => AgentOutcome::Welcome { version: w.version },
                HelloReply::Refused(r) => AgentOutcome::Refused(r.reason),
            }))
    }

    /// Bytes that arrived after the reply.
    pub fn into_remainder(self) -> Vec<u8> {
        self.decoder.into_remainder()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (ControlHandshake, AgentHandshake, Vec<u8>) {
        let (agent, hello) =
            AgentHandshake::start("c1".into(), Secret::new("tok"), "test".into()).unwrap();
        (ControlHandshake::new(), agent, hello)
    }

    #[test]
    fn accepted_handshake_welcomes_at_current_version() {
        let (mut cp, mut agent, hello) = pair();
        let ev = cp.handle_bytes(&hello).unwrap();
        assert_eq!(
            ev,
            HandshakeEvent::Authenticate {
                computer_id: "c1".into(),
                token: Secret::new("tok"),
                agent: "test".into()
            }
        );
        cp.accept();
        let reply = cp.poll_transmit().unwrap();
        assert_eq!(
            agent.handle_bytes(&reply).unwrap(),
            Some(AgentOutcome::Welcome {
                version: PROTOCOL_VERSION
            })
        );
        assert_eq!(cp.version(), Some(PROTOCOL_VERSION));
    }

    #[test]
    fn refused_credentials_reach_the_agent() {
        let (mut cp, mut agent, hello) = pair();
        cp.handle_bytes(&hello);
        cp.refuse(RefuseReason::BadCredentials);
        let reply = cp.poll_transmit().unwrap();
        assert_eq!(
            agent.handle_bytes(&reply).unwrap(),
            Some(AgentOutcome::Refused(RefuseReason::BadCredentials))
        );
        // A second decision is ignored.
        cp.accept();
        assert!(cp.poll_transmit().is_none());
    }

    #[test]
    fn future_only_guest_is_refused_with_supported_range() {
        let hello = Hello {
            version: PROTOCOL_VERSION + 5,
            min_version: PROTOCOL_VERSION + 1,
            computer_id: "c".into(),
            token: Secret::new("t"),
            agent: String::new(),
        };
        let mut cp = ControlHandshake::new();
        let ev = cp.handle_bytes(&encode(&hello).unwrap()).unwrap();
        assert!(matches!(
            ev,
            HandshakeEvent::Failed(RefuseReason::UnsupportedVersion { .. })
        ));
        assert!(cp.poll_transmit().is_some());
    }

    #[test]
    fn garbage_and_oversized_hello_fail_closed() {
        let mut cp = ControlHandshake::new();
        let ev = cp.handle_bytes(&[0, 0, 0, 3, 0xff, 0xff, 0xff]).unwrap();
        assert_eq!(ev, HandshakeEvent::Failed(RefuseReason::Malformed));
        let mut cp = ControlHandshake::new();
        let ev = cp
            .handle_bytes(&(MAX_HELLO_LEN as u32 + 1).to_be_bytes())
            .unwrap();
        assert_eq!(ev, HandshakeEvent::Failed(RefuseReason::Malformed));
    }

    #[test]
    fn secret_debug_is_redacted() {
        assert_eq!(format!("{:?}", Secret::new("hunter2")), "Secret(***)");
    }
}

//! The guest's end of the QUIC tunnel: dial out, pin, say hello, serve operation streams.
//!
//! [`run`] keeps one connection to the control plane alive forever, reconnecting with jittered
//! exponential backoff. The control plane's certificate is pinned by its SHA-256 fingerprint
//! ([`PinnedCert`]); no CA or hostname is trusted. Each operation arrives as its own stream and
//! is handed to [`crate::ops`]; this module only moves bytes and tracks the connection.

use crate::config::Config;
use crate::ops::Ops;
use gateway_proto::{encode, AgentHandshake, AgentOutcome, ControlMsg, FrameDecoder, RefuseReason};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::Duration;
use tracing::{info, warn};

/// ALPN protocol id of the tunnel (the control plane's `tls::ALPN`).
pub const ALPN: &[u8] = b"rakazo-tunnel";
const BACKOFF_START: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(10);
/// A connection that lasted this long resets the backoff.
const STABLE_AFTER: Duration = Duration::from_secs(10);

/// Accepts exactly one server certificate: the one whose DER hashes to the pinned fingerprint.
#[derive(Debug)]
pub struct PinnedCert {
    sha256: [u8; 32],
    provider: Arc<CryptoProvider>,
}

impl PinnedCert {
    pub fn new(sha256: [u8; 32], provider: Arc<CryptoProvider>) -> Self {
        Self { sha256, provider }
    }
}

impl ServerCertVerifier for PinnedCert {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let got: [u8; 32] = Sha256::digest(end_entity.as_ref()).into();
        if got == self.sha256 {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The QUIC client configuration: TLS 1.3 on ring, the pinned certificate, our ALPN.
pub fn client_config(cert_sha256: [u8; 32]) -> anyhow::Result<quinn::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(PinnedCert::new(cert_sha256, provider)))
        .with_no_client_auth();
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls)?;
    let mut config = quinn::ClientConfig::new(Arc::new(quic));
    config.transport_config(Arc::new(transport_config()));
    Ok(config)
}

fn transport_config() -> quinn::TransportConfig {
    let mut t = quinn::TransportConfig::default();
    // A control plane that vanished (crash, network) is noticed within the idle timeout;
    // keepalives every 2 s keep a healthy but quiet tunnel open.
    t.max_idle_timeout(Some(quinn::IdleTimeout::from(quinn::VarInt::from_u32(
        6_000,
    ))));
    t.keep_alive_interval(Some(Duration::from_secs(2)));
    // The control plane opens one stream per operation.
    t.max_concurrent_bidi_streams(1024u32.into());
    t.max_concurrent_uni_streams(0u32.into());
    t.stream_receive_window((16u32 << 20).into());
    t.receive_window((64u32 << 20).into());
    t.send_window(64 << 20);
    t
}

/// How a session ended.
#[derive(Debug)]
enum SessionEnd {
    Refused(RefuseReason),
    Closed(String),
}

/// Stays connected to the control plane forever.
pub async fn run(config: Config, ops: Arc<Ops>) -> anyhow::Result<()> {
    let mut endpoint = quinn::Endpoint::client(if config.control_addr.is_ipv4() {
        "0.0.0.0:0".parse()?
    } else {
        "[::]:0".parse()?
    })?;
    endpoint.set_default_client_config(client_config(config.cert_sha256)?);
    let mut backoff = BACKOFF_START;
    loop {
        let started = tokio::time::Instant::now();
        let end = session(&endpoint, &config, &ops).await;
        match &end {
            SessionEnd::Refused(reason) => warn!(%reason, "control plane refused this guest"),
            SessionEnd::Closed(why) => info!(reason = %why, "tunnel closed"),
        }
        if started.elapsed() >= STABLE_AFTER {
            backoff = BACKOFF_START;
        }
        // Full jitter in [backoff/2, backoff): guests restarted together do not reconnect together.
        let jittered = backoff.mul_f64(0.5 + rand::random::<f64>() / 2.0);
        tokio::time::sleep(jittered).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

async fn session(endpoint: &quinn::Endpoint, config: &Config, ops: &Arc<Ops>) -> SessionEnd {
    let conn = match endpoint.connect(config.control_addr, "rakazo-control-plane") {
        Ok(connecting) => match connecting.await {
            Ok(conn) => conn,
            Err(e) => return SessionEnd::Closed(format!("connect: {e}")),
        },
        Err(e) => return SessionEnd::Closed(format!("connect: {e}")),
    };
    let (mut send, mut recv) = match conn.open_bi().await {
        Ok(s) => s,
        Err(e) => return SessionEnd::Closed(format!("open control stream: {e}")),
    };
    let agent = format!("rakazo-guest {}", env!("CARGO_PKG_VERSION"));
    let (mut hs, hello) =
        match AgentHandshake::start(config.computer_id.clone(), config.token.clone(), agent) {
            Ok(v) => v,
            Err(e) => return SessionEnd::Closed(format!("encode hello: {e}")),
        };
    if let Err(e) = send.write_all(&hello).await {
        return SessionEnd::Closed(format!("send hello: {e}"));
    }
    let outcome = loop {
        match recv.read_chunk(4096, true).await {
            Ok(Some(chunk)) => match hs.handle_bytes(&chunk.bytes) {
                Ok(Some(outcome)) => break outcome,
                Ok(None) => {}
                Err(e) => return SessionEnd::Closed(format!("bad hello reply: {e}")),
            },
            Ok(None) => return SessionEnd::Closed("control stream ended during hello".into()),
            Err(e) => return SessionEnd::Closed(format!("hello: {e}")),
        }
    };
    match outcome {
        AgentOutcome::Refused(reason) => return SessionEnd::Refused(reason),
        AgentOutcome::Welcome { version } => {
            info!(computer_id = %config.computer_id, version, "tunnel connected")
        }
    }
    let remainder = hs.into_remainder();
    let control = tokio::spawn(control_loop(send, recv, remainder, ops.clone()));
    let end = loop {
        match conn.accept_bi().await {
            Ok((send, recv)) => {
                let ops = ops.clone();
                tokio::spawn(async move { ops.serve_stream(send, recv).await });
            }
            Err(e) => break SessionEnd::Closed(e.to_string()),
        }
    };
    control.abort();
    // Operations still running lose their streams and end themselves (exec kills its tree).
    end
}

async fn control_loop(
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    remainder: Vec<u8>,
    ops: Arc<Ops>,
) {
    let mut decoder = FrameDecoder::with_max(64 * 1024);
    decoder.push(&remainder);
    loop {
        loop {
            match decoder.next_message::<ControlMsg>() {
                Ok(Some(ControlMsg::Lease { bot, lease })) => ops.update_fence(bot, lease),
                Ok(Some(ControlMsg::Ping { seq })) => {
                    if let Ok(frame) = encode(&ControlMsg::Pong { seq }) {
                        if send.write_all(&frame).await.is_err() {
                            return;
                        }
                    }
                }
                Ok(Some(ControlMsg::Pong { .. })) => {}
                Ok(None) => break,
                Err(e) => {
                    warn!(error = %e, "malformed control message; dropping the control stream");
                    let _ = recv.stop(3u32.into());
                    return;
                }
            }
        }
        match recv.read_chunk(64 * 1024, true).await {
            Ok(Some(chunk)) => decoder.push(&chunk.bytes),
            Ok(None) | Err(_) => return,
        }
    }
}

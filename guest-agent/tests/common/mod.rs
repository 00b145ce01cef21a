//! What the guest-agent integration tests share: a fake control plane's QUIC endpoint (on UDP,
//! or over the TCP carrier) with a self-signed certificate the guest pins.

use anyhow::Result;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// A self-signed certificate for `rakazo-control-plane` and its SHA-256 fingerprint (hex).
pub fn identity() -> Result<(CertificateDer<'static>, PrivateKeyDer<'static>, String)> {
    let ck = rcgen::generate_simple_self_signed(vec!["rakazo-control-plane".into()])?;
    let cert = ck.cert.der().clone();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.signing_key.serialize_der()));
    let fingerprint = hex::encode(Sha256::digest(cert.as_ref()));
    Ok((cert, key, fingerprint))
}

/// A quinn server on 127.0.0.1:0 speaking TLS 1.3 (ring) with the tunnel's ALPN.
pub fn server(
    cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
) -> Result<quinn::Endpoint> {
    Ok(quinn::Endpoint::server(
        server_config(cert, key, quinn::TransportConfig::default())?,
        "127.0.0.1:0".parse()?,
    )?)
}

/// The TCP carrier server, also taking websockets (upgraded by hand, any path) on a second
/// listener, whose address is returned: the control plane's `GET /v1/tunnel` in miniature.
#[allow(dead_code)] // reason: each test binary compiles this module; only tunnel.rs uses it
pub async fn ws_server(
    cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
) -> Result<(quinn::Endpoint, carrier::Carrier, std::net::SocketAddr)> {
    let (endpoint, carrier) = tcp_server(cert, key).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(carrier::ws::serve_upgrades(listener, carrier.clone()));
    Ok((endpoint, carrier, addr))
}

/// The same server over the TCP carrier on 127.0.0.1:0, as the control plane runs it beside the
/// UDP one.
#[allow(dead_code)] // reason: each test binary compiles this module; only tunnel.rs uses it
pub async fn tcp_server(
    cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
) -> Result<(quinn::Endpoint, carrier::Carrier)> {
    let mut transport = quinn::TransportConfig::default();
    carrier::tune_transport(&mut transport);
    let config = server_config(cert, key, transport)?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let (socket, carrier) = carrier::listen(listener, carrier::Limits::default())?;
    let mut endpoint_config = quinn::EndpointConfig::default();
    carrier::tune_endpoint(&mut endpoint_config);
    let runtime = quinn::default_runtime().ok_or_else(|| anyhow::anyhow!("no runtime"))?;
    let endpoint =
        quinn::Endpoint::new_with_abstract_socket(endpoint_config, Some(config), socket, runtime)?;
    Ok((endpoint, carrier))
}

fn server_config(
    cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
    transport: quinn::TransportConfig,
) -> Result<quinn::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)?;
    tls.alpn_protocols = vec![guest_agent::tunnel::ALPN.to_vec()];
    let quic = quinn::crypto::rustls::QuicServerConfig::try_from(tls)?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(quic));
    config.transport_config(Arc::new(transport));
    Ok(config)
}

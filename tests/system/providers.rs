//! The provider conformance suite (issues 10, 13, 35): one set of cases run against `local`,
//! `docker`, `fake`, and the `e2b`, `daytona` and `kubernetes` (pod and sandbox modes) adapters
//! against in-memory fakes of their services (which run the guest for real on this host),
//! through the real `rakazo serve`, plus the isolation boundary of the real ones.
//!
//! What "behind the control plane's back" means differs per provider (a killed guest process, a
//! stopped or removed container, a deleted machine directory, a sandbox paused, stopped or lost
//! by its service); [`Machine`] hides that, the cases do not.

use anyhow::{bail, Context, Result};
use control_plane::client::ClientError;
use hyper::{Method, StatusCode};
use std::path::{Path, PathBuf};
use tests::engine::TwoEngines;
use tests::fake_daytona::FakeDaytona;
use tests::fake_e2b::FakeE2b;
use tests::fake_kube::{FakeKube, Res};
use tests::{engine, pids_with_env, World, WorldOptions};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Local,
    Docker,
    Fake,
    E2b,
    Daytona,
    /// Pod mode, and agent-sandbox's Sandbox mode.
    Kube,
    KubeSandbox,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Local => "local",
            Kind::Docker => "docker",
            Kind::Fake => "fake",
            Kind::E2b => "e2b",
            Kind::Daytona => "daytona",
            Kind::Kube | Kind::KubeSandbox => "kubernetes",
        }
    }
}

/// The fake service a remote kind's computers live in (or the two engines of a docker provider
/// that has two); it lives as long as its world.
enum Service {
    Own,
    E2b(FakeE2b),
    Daytona(FakeDaytona),
    Engines(TwoEngines),
    Kube(FakeKube, &'static str),
}

impl Service {
    async fn start(kind: Kind) -> Result<Self> {
        Ok(match kind {
            Kind::E2b => Service::E2b(FakeE2b::start().await?),
            Kind::Daytona => Service::Daytona(FakeDaytona::start().await?),
            Kind::Kube => Service::Kube(FakeKube::start(&tests::bin("rakazo-guest")).await?, "pod"),
            Kind::KubeSandbox => Service::Kube(
                FakeKube::start(&tests::bin("rakazo-guest")).await?,
                "sandbox",
            ),
            _ => Service::Own,
        })
    }

    fn env(&self) -> Vec<(String, String)> {
        match self {
            Service::Own => Vec::new(),
            Service::E2b(f) => f.world_env(),
            Service::Daytona(f) => f.world_env(),
            Service::Engines(e) => e.world_env(),
            Service::Kube(f, mode) => f.world_env(mode),
        }
    }

    fn api_key(&self) -> Option<&str> {
        match self {
            Service::Own | Service::Engines(_) => None,
            Service::E2b(f) => Some(&f.api_key),
            Service::Daytona(f) => Some(&f.api_key),
            Service::Kube(f, _) => Some(&f.token),
        }
    }

    /// The sandboxes the service holds for computer `c`.
    fn sandboxes(&self, c: &str) -> Vec<String> {
        match self {
            Service::Own | Service::Engines(_) => Vec::new(),
            Service::E2b(f) => f.sandboxes_of(c),
            Service::Daytona(f) => f.sandboxes_of(c),
            Service::Kube(f, _) => f.objects_of(Res::Pods, c),
        }
    }

    /// The engines docker computers may be on.
    fn docker_engines(&self) -> Vec<PathBuf> {
        match self {
            Service::Engines(e) => vec![e.b.clone(), e.c.clone()],
            _ => vec![engine::socket()],
        }
    }
}

async fn world(kind: Kind) -> Result<(World, Service)> {
    world_in(kind, Service::start(kind).await?).await
}

async fn world_in(kind: Kind, service: Service) -> Result<(World, Service)> {
    let mut w = World::start_with(WorldOptions {
        providers: Some(format!("{},local", kind.name())),
        default_provider: Some(kind.name().into()),
        env: service.env(),
        ..Default::default()
    })
    .await?;
    w.allow_warn("machine gone");
    if let Some(key) = service.api_key() {
        w.add_secret(key);
    }
    Ok((w, service))
}

/// A computer's machine as the test sees it from outside.
struct Machine<'a> {
    w: &'a World,
    kind: Kind,
    c: String,
    service: &'a Service,
}

impl Machine<'_> {
    /// The engine holding a docker computer's container.
    fn docker_engine(&self) -> Result<PathBuf> {
        match self.service {
            Service::Engines(e) => Ok(e.holder(&self.c)?.to_path_buf()),
            _ => Ok(engine::socket()),
        }
    }

    /// The one sandbox a remote computer has.
    fn sandbox(&self) -> Result<String> {
        match self.service.sandboxes(&self.c).as_slice() {
            [one] => Ok(one.clone()),
            other => bail!("computer {} has sandboxes {other:?}", self.c),
        }
    }

    /// Identifies the running machine instance: the guest's pid (local, fake; and the sandbox
    /// of e2b, daytona) or the container's id and start time (docker).
    fn instance(&self) -> Result<String> {
        match self.kind {
            Kind::E2b | Kind::Daytona | Kind::Kube | Kind::KubeSandbox => {
                let pids = pids_with_env("RAKAZO_COMPUTER_ID", &self.c);
                Ok(format!("{} {pids:?}", self.sandbox()?))
            }
            Kind::Docker => Ok(engine::podman_on(
                &self.docker_engine()?,
                &[
                    "inspect",
                    "--format",
                    "{{.Id}} {{.State.StartedAt}} {{.State.Status}}",
                    &engine::container_of(&self.c),
                ],
            )?
            .trim()
            .to_string()),
            Kind::Local | Kind::Fake => {
                let pids = pids_with_env("RAKAZO_COMPUTER_ID", &self.c);
                Ok(format!("{pids:?}"))
            }
        }
    }

    fn fake_dirs(&self) -> Vec<PathBuf> {
        let root = self.w.machines_dir.path().join("fake");
        std::fs::read_dir(root)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&format!("fake-{}-", self.c)))
            })
            .collect()
    }

    /// The machine stops without the control plane knowing (a crash, an operator, a lapsed
    /// E2B timeout).
    async fn stop_behind_back(&self) -> Result<()> {
        match (self.kind, self.service) {
            (Kind::E2b, Service::E2b(f)) => f.pause(&self.sandbox()?).await,
            (Kind::Daytona, Service::Daytona(f)) => f.stop(&self.sandbox()?).await,
            (Kind::E2b | Kind::Daytona, _) => bail!("no service for {:?}", self.kind),
            // The guest dies; its pod is Failed and stays (restartPolicy Never).
            _ => self.stop_own_behind_back()?,
        }
        Ok(())
    }

    fn stop_own_behind_back(&self) -> Result<()> {
        match self.kind {
            Kind::Docker => {
                let on = self.docker_engine()?;
                engine::podman_on(&on, &["stop", "-t", "5", &engine::container_of(&self.c)])?;
            }
            Kind::Local | Kind::Fake | Kind::Kube | Kind::KubeSandbox => {
                for pid in pids_with_env("RAKAZO_COMPUTER_ID", &self.c) {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                // Gone for good before the test goes on (a SIGKILL takes effect asynchronously).
                // Up to 10 s, in 20 ms steps.
                let mut tries = 500;
                while !pids_with_env("RAKAZO_COMPUTER_ID", &self.c).is_empty() {
                    tries -= 1;
                    if tries == 0 {
                        bail!("the guest of {} outlived SIGKILL", self.c);
                    }
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
            }
            Kind::E2b | Kind::Daytona => bail!("a remote machine stops through its service"),
        }
        Ok(())
    }

    /// The machine disappears with its disk (the provider lost it).
    async fn vanish(&self) -> Result<()> {
        match (self.kind, self.service) {
            (Kind::E2b, Service::E2b(f)) => {
                f.kill(&self.sandbox()?).await;
                return Ok(());
            }
            (Kind::Daytona, Service::Daytona(f)) => {
                f.kill(&self.sandbox()?).await;
                return Ok(());
            }
            // kubectl delete of everything of the computer, its home claim too.
            (Kind::Kube | Kind::KubeSandbox, Service::Kube(f, _)) => {
                f.delete_computer(&self.c).await;
                return Ok(());
            }
            _ => {}
        }
        self.stop_behind_back().await?;
        match self.kind {
            Kind::Docker => {
                let on = self.docker_engine()?;
                engine::podman_on(
                    &on,
                    &["rm", "-f", "-t", "0", &engine::container_of(&self.c)],
                )?;
                engine::podman_on(
                    &on,
                    &["volume", "rm", "-f", &format!("rakazo-home-{}", self.c)],
                )?;
            }
            Kind::Local => std::fs::remove_dir_all(self.w.local_dir_of(&self.c))?,
            Kind::Fake => {
                for d in self.fake_dirs() {
                    std::fs::remove_dir_all(d)?;
                }
            }
            Kind::E2b | Kind::Daytona | Kind::Kube | Kind::KubeSandbox => {
                bail!("no service for {:?}", self.kind)
            }
        }
        Ok(())
    }
}

async fn lifecycle(w: &World, c: &str, action: &str) -> Result<serde_json::Value, ClientError> {
    w.post(
        &format!("/v1/computers/{c}/{action}"),
        serde_json::json!({}),
    )
    .await
}

/// Provision, prepare (idempotent), state, stop, start, reconnect through a stale reference,
/// replacement restoring the home, destroy (idempotent), exec and files; desktops on the real
/// providers.
async fn conformance(kind: Kind) -> Result<()> {
    conformance_in(kind, Service::start(kind).await?).await
}

/// [`conformance`] with the service (or engines) given.
async fn conformance_in(kind: Kind, service: Service) -> Result<()> {
    let (mut w, service) = world_in(kind, service).await?;
    let c = w
        .create_computer(&format!("ws-conf-{}", kind.name()))
        .await?;
    let m = Machine {
        w: &w,
        kind,
        c: c.clone(),
        service: &service,
    };
    if let Service::Engines(e) = &service {
        // Its caller made b count one computer more.
        assert_eq!(
            e.holder(&c)?,
            e.c,
            "placed on the engine with fewer computers"
        );
    }
    let v = w.show(&c).await?;
    assert_eq!(
        (v["provider"].as_str(), v["state"].as_str()),
        (Some(kind.name()), Some("running"))
    );
    assert_eq!(v["connected"], true);

    // exec and files.
    let out = w
        .exec(
            &c,
            serde_json::json!({ "argv": ["sh", "-c", "echo out; echo err >&2; exit 3"] }),
        )
        .await?;
    assert_eq!(
        (out.stdout.as_slice(), out.stderr.as_slice(), out.code),
        (&b"out\n"[..], &b"err\n"[..], Some(3))
    );
    w.put_file(&c, "kept/a.txt", b"first".to_vec(), false)
        .await?;
    assert_eq!(w.get_file(&c, "kept/a.txt").await?.as_ref(), b"first");

    // Desktops on the real providers.
    if kind != Kind::Fake {
        let lease = w.lease(&c, "bot-1", "run-conf").await?;
        let path = format!("/v1/computers/{c}/screens/bot-1");
        w.post(
            &format!("{path}/ensure"),
            serde_json::json!({ "lease": lease }),
        )
        .await?;
        let obs = w
            .post(
                &format!("{path}/observe"),
                serde_json::json!({ "lease": lease }),
            )
            .await?;
        assert_eq!(
            (obs["width"].as_u64(), obs["height"].as_u64()),
            (Some(1280), Some(800))
        );
        w.post(
            &format!("/v1/computers/{c}/leases/bot-1/release"),
            serde_json::json!({ "lease": lease, "outcome": "cancelled" }),
        )
        .await?;
    }

    // prepare is idempotent: starting a running computer leaves its machine alone.
    let before = m.instance()?;
    lifecycle(&w, &c, "start").await?;
    assert_eq!(
        m.instance()?,
        before,
        "start on a running computer restarted its machine"
    );

    // stop (twice), then start: the home is kept. The stop checkpoints it.
    lifecycle(&w, &c, "stop").await?;
    lifecycle(&w, &c, "stop").await?;
    assert_eq!(w.show(&c).await?["state"], "stopped");
    lifecycle(&w, &c, "start").await?;
    assert_eq!(w.get_file(&c, "kept/a.txt").await?.as_ref(), b"first");

    // Reconnect through a stale reference: the machine stopped behind our back is started
    // again through the reference the control plane holds; the home is its own, unrestored.
    w.put_file(&c, "kept/b.txt", b"since the checkpoint".to_vec(), false)
        .await?;
    m.stop_behind_back().await?;
    lifecycle(&w, &c, "start").await?;
    assert_eq!(
        w.get_file(&c, "kept/b.txt").await?.as_ref(),
        b"since the checkpoint"
    );
    if matches!(
        kind,
        Kind::Docker | Kind::E2b | Kind::Daytona | Kind::Kube | Kind::KubeSandbox
    ) {
        assert_eq!(
            m.instance()?.split(' ').next(),
            before.split(' ').next(),
            "the same container or sandbox"
        );
    }

    // A vanished machine: start provisions a replacement restored from the last checkpoint.
    lifecycle(&w, &c, "stop").await?; // checkpoints b.txt
    w.put_file(&c, "kept/c.txt", b"never checkpointed".to_vec(), false)
        .await
        .expect_err("a stopped computer takes no files");
    lifecycle(&w, &c, "start").await?;
    m.vanish().await?;
    let restarted = lifecycle(&w, &c, "start").await?;
    assert_eq!(restarted["state"], "running");
    assert_eq!(w.get_file(&c, "kept/a.txt").await?.as_ref(), b"first");
    assert_eq!(
        w.get_file(&c, "kept/b.txt").await?.as_ref(),
        b"since the checkpoint"
    );
    match kind {
        Kind::Fake => assert_eq!(m.fake_dirs().len(), 1, "one replacement machine"),
        Kind::E2b | Kind::Daytona | Kind::Kube | Kind::KubeSandbox => {
            let replacement = m.sandbox()?;
            assert_ne!(
                Some(replacement.as_str()),
                before.split(' ').next(),
                "a new sandbox"
            );
        }
        _ => {}
    }

    // destroy is idempotent.
    for _ in 0..2 {
        w.client
            .json(Method::DELETE, &format!("/v1/computers/{c}"), None)
            .await?;
    }
    match kind {
        Kind::Docker => {
            for on in service.docker_engines() {
                assert!(
                    !engine::container_exists_on(&on, &c)?,
                    "container left after destroy on {}",
                    on.display()
                );
            }
        }
        Kind::Local => assert!(!w.local_dir_of(&c).exists()),
        Kind::Fake => assert!(m.fake_dirs().is_empty()),
        Kind::E2b => assert!(
            service.sandboxes(&c).is_empty(),
            "sandbox left after destroy"
        ),
        Kind::Daytona => {
            if let Service::Daytona(f) = &service {
                for sb in f.sandboxes_of(&c) {
                    assert_eq!(f.state_of(&sb), Some("destroying"), "sandbox {sb} left");
                }
            }
        }
        Kind::Kube | Kind::KubeSandbox => {
            if let Service::Kube(f, _) = &service {
                // Pods end after their processes; the collector follows owners.
                let left = crate::kubernetes::settled(|| f.all_of(&c).is_empty()).await;
                assert!(left, "objects left after destroy: {:?}", f.all_of(&c));
            }
        }
    }
    w.check_log()
}

#[tokio::test(flavor = "multi_thread")]
async fn conformance_local() -> Result<()> {
    conformance(Kind::Local).await
}

#[tokio::test(flavor = "multi_thread")]
async fn conformance_docker() -> Result<()> {
    conformance(Kind::Docker).await
}

/// The docker provider on two engines (two podman services with their own storage); the
/// computer lives on the second one (`c`), the first counting one computer more.
#[tokio::test(flavor = "multi_thread")]
async fn conformance_docker_two_engines() -> Result<()> {
    let engines = TwoEngines::take().await?;
    engines.weigh_down(&engines.b)?;
    conformance_in(Kind::Docker, Service::Engines(engines)).await
}

/// Computers spread over two engines; one engine dies with its containers, as with a lost host.
/// A start of a computer that lived there answers 503 while the engine may only be restarting;
/// once it has been silent for the grace, a start boots a replacement on the other engine with
/// the home of the last checkpoint, and the other engine's computer runs on; so does one whose
/// caller placed it on the lost engine (with a WARN: its place is gone). When the engine is back,
/// destroying the computer also removes what it left there.
#[tokio::test(flavor = "multi_thread")]
async fn a_lost_engine_s_computers_are_replaced_on_the_other() -> Result<()> {
    let engines = TwoEngines::take().await?;
    let mut env = engines.world_env();
    env.push(("RAKAZO_DOCKER_ENGINE_GONE_AFTER_SECS".into(), "2".into()));
    let mut w = World::start_with(WorldOptions {
        providers: Some("docker,local".into()),
        default_provider: Some("docker".into()),
        env,
        ..Default::default()
    })
    .await?;
    w.allow_warn("machine gone");
    w.allow_warn("docker engine lost");

    // One computer on each engine: b is first when both hold as many.
    let stays = w.create_computer("ws-engine-stays").await?;
    let moves = w.create_computer("ws-engine-moves").await?;
    assert_eq!(engines.holder(&stays)?, engines.b);
    assert_eq!(engines.holder(&moves)?, engines.c);
    let body = serde_json::json!({ "workspace": "ws-engine-placed", "placement": "c" });
    let v = w
        .client
        .json(Method::POST, "/v1/computers", Some(&body))
        .await?;
    let placed = v["id"].as_str().context("id")?.to_string();
    w.track_docker(&placed);
    if let Ok(token) = w.enrollment_token(&placed) {
        w.add_secret(&token);
    }
    assert_eq!(engines.holder(&placed)?, engines.c);
    w.put_file(&moves, "kept/home.txt", b"checkpointed".to_vec(), false)
        .await?;
    lifecycle(&w, &moves, "stop").await?; // checkpoints the home
    lifecycle(&w, &moves, "start").await?;
    assert_eq!(engines.holder(&moves)?, engines.c);
    w.put_file(
        &moves,
        "kept/later.txt",
        b"never checkpointed".to_vec(),
        false,
    )
    .await?;

    // Engine c dies: its service, then its computers' processes.
    engine::kill_instance("c")?;
    let on_c = [&moves, &placed];
    for pid in on_c
        .iter()
        .flat_map(|c| pids_with_env("RAKAZO_COMPUTER_ID", c))
    {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let unavailable = |e: ClientError| match e {
        ClientError::Api { status, code, .. }
            if status == StatusCode::SERVICE_UNAVAILABLE && code == "provider_unavailable" =>
        {
            Ok(())
        }
        other => bail!("expected 503 provider_unavailable, got {other}"),
    };
    let began = tokio::time::Instant::now();
    unavailable(
        lifecycle(&w, &moves, "start")
            .await
            .expect_err("an engine silent for less than the grace may be restarting"),
    )?;
    // Silent past the grace: the start replaces the machine (each try before is a 503).
    let restarted = loop {
        match lifecycle(&w, &moves, "start").await {
            Ok(v) => break v,
            Err(e) if began.elapsed() < std::time::Duration::from_secs(30) => {
                unavailable(e)?;
                tokio::time::sleep(std::time::Duration::from_millis(250)).await;
            }
            Err(e) => bail!("no replacement 30 s after the engine died: {e}"),
        }
    };
    assert_eq!(restarted["state"], "running");
    assert!(
        began.elapsed() >= std::time::Duration::from_secs(2),
        "replaced within the grace"
    );
    assert!(engine::container_exists_on(&engines.b, &moves)?);
    assert_eq!(
        w.get_file(&moves, "kept/home.txt").await?.as_ref(),
        b"checkpointed"
    );
    w.get_file(&moves, "kept/later.txt")
        .await
        .expect_err("what was never checkpointed died with the engine");
    assert_eq!(w.sh(&stays, "echo up").await?, "up\n");
    // The computer placed on c still gets a machine, on b; it keeps its placement.
    w.allow_warn("placement could not take its replacement machine");
    lifecycle(&w, &placed, "start").await?;
    assert!(engine::container_exists_on(&engines.b, &placed)?);
    assert_eq!(w.show(&placed).await?["placement"], "c");
    let log = w.log();
    let warned = log
        .lines()
        .find(|l| l.contains("placement could not take its replacement machine"))
        .context("no WARN about the placement")?;
    assert!(
        warned.contains("placement=c") && warned.contains("provider_ref=default/"),
        "the WARN names both engines: {warned}"
    );
    assert_eq!(w.sh(&placed, "echo up").await?, "up\n");

    // c comes back with the old container: destroy removes it there too.
    engine::start_instance("c")?;
    assert!(engine::container_exists_on(&engines.c, &moves)?);
    w.client
        .json(Method::DELETE, &format!("/v1/computers/{moves}"), None)
        .await?;
    for on in [&engines.b, &engines.c] {
        assert!(
            !engine::container_exists_on(on, &moves)?,
            "left on {}",
            on.display()
        );
    }
    w.check_log()
}

#[tokio::test(flavor = "multi_thread")]
async fn conformance_fake() -> Result<()> {
    conformance(Kind::Fake).await
}

#[tokio::test(flavor = "multi_thread")]
async fn conformance_e2b_fake() -> Result<()> {
    conformance(Kind::E2b).await
}

#[tokio::test(flavor = "multi_thread")]
async fn conformance_daytona_fake() -> Result<()> {
    conformance(Kind::Daytona).await
}

#[tokio::test(flavor = "multi_thread")]
async fn conformance_kubernetes_fake() -> Result<()> {
    conformance(Kind::Kube).await
}

#[tokio::test(flavor = "multi_thread")]
async fn conformance_kubernetes_sandbox_fake() -> Result<()> {
    conformance(Kind::KubeSandbox).await
}

/// Every regular file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() => todo.push(p),
                Ok(t) if t.is_file() => out.push(p),
                _ => {}
            }
        }
    }
    out
}

/// From inside a computer, nothing of the control plane's or of another computer's is
/// readable: the API token, the capability key, the tunnel key, the database, another home.
async fn no_command_reads_past_its_computer(kind: Kind) -> Result<()> {
    let (mut w, _service) = world(kind).await?;
    let c = w
        .create_computer(&format!("ws-iso-{}", kind.name()))
        .await?;
    let other = w
        .create_computer(&format!("ws-iso-other-{}", kind.name()))
        .await?;
    w.put_file(
        &other,
        "private/diary.txt",
        b"other computer's secret".to_vec(),
        false,
    )
    .await?;
    // Targets: every file of the data dir (by path), and the other computer's home.
    let mut targets: Vec<PathBuf> = files_under(w.data_dir.path());
    for name in ["api-token", "capability-key", "tunnel-key.pem", "rakazo.db"] {
        let p = w.data_dir.path().join(name);
        assert!(
            targets.contains(&p) || name == "rakazo.db",
            "{name} is in the data dir"
        );
    }
    let other_home = match kind {
        Kind::Docker => PathBuf::from(
            engine::podman(&[
                "volume",
                "inspect",
                "--format",
                "{{.Mountpoint}}",
                &format!("rakazo-home-{other}"),
            ])?
            .trim(),
        ),
        _ => w.home_of(&other),
    };
    targets.push(other_home.join("private/diary.txt"));
    targets.push(other_home.clone());
    // The other computer's guest: its environment and memory.
    for pid in pids_with_env("RAKAZO_COMPUTER_ID", &other) {
        targets.push(PathBuf::from(format!("/proc/{pid}/environ")));
        targets.push(PathBuf::from(format!("/proc/{pid}/mem")));
    }
    assert!(targets.len() > 5, "{targets:?}");
    let list: String = targets
        .iter()
        .map(|p| format!("{}\n", p.display()))
        .collect();
    w.put_file(&c, "targets.txt", list.into_bytes(), false)
        .await?;
    // Reads every target as a file and as a directory; prints what it could read.
    let out = w.sh(&c,
        r#"while IFS= read -r p; do
             if [ -d "$p" ]; then ls -A "$p" >/dev/null 2>&1 && echo "LISTED $p";
             else head -c 64 "$p" >/dev/null 2>&1 && echo "READ $p"; fi
           done < targets.txt
           cat ../../../api-token 2>/dev/null; cat /proc/1/environ 2>/dev/null | tr '\0' '\n' | grep RAKAZO_; true"#,
    )
    .await?;
    assert_eq!(
        out.trim(),
        "",
        "a command reached past its computer:\n{out}"
    );
    assert!(!out.contains(w.api_token()));
    // The computer's own home is still its own.
    assert_eq!(
        w.sh(&c, "cat targets.txt | wc -l").await?.trim(),
        targets.len().to_string()
    );
    w.check_log()
}

#[tokio::test(flavor = "multi_thread")]
async fn isolation_local() -> Result<()> {
    no_command_reads_past_its_computer(Kind::Local).await
}

#[tokio::test(flavor = "multi_thread")]
async fn isolation_docker() -> Result<()> {
    no_command_reads_past_its_computer(Kind::Docker).await
}

/// The message of an API error that must have `status` and `code`.
pub(crate) fn expect(e: ClientError, status: StatusCode, code: &str) -> Result<String> {
    match e {
        ClientError::Api {
            status: s,
            code: c,
            message,
            ..
        } if s == status && c == code => Ok(message),
        other => bail!("expected {status} {code}, got {other}"),
    }
}

/// Provider errors reach the user by class: capacity and passing failures are 503s that say
/// so, a refused request is a 422, and nothing is left half-made.
#[tokio::test(flavor = "multi_thread")]
async fn provider_errors_are_classified() -> Result<()> {
    let (mut w, _service) = world(Kind::Fake).await?;
    let faults = w.machines_dir.path().join("fake").join("faults");
    std::fs::create_dir_all(faults.parent().context("fake root")?)?;
    std::fs::write(&faults, "provision capacity\n")?;
    let e = w
        .client
        .json(
            Method::POST,
            "/v1/computers",
            Some(&serde_json::json!({ "workspace": "ws-cap" })),
        )
        .await
        .expect_err("no capacity");
    let msg = expect(e, StatusCode::SERVICE_UNAVAILABLE, "provider_capacity")?;
    assert!(msg.contains("no capacity"), "{msg}");

    std::fs::write(&faults, "provision invalid\n")?;
    let e = w
        .client
        .json(
            Method::POST,
            "/v1/computers",
            Some(&serde_json::json!({ "workspace": "ws-inv" })),
        )
        .await
        .expect_err("refused");
    expect(e, StatusCode::UNPROCESSABLE_ENTITY, "provider_invalid")?;

    let c = w.create_computer("ws-ok").await?;
    lifecycle(&w, &c, "stop").await?;
    std::fs::write(&faults, "prepare transient\n")?;
    let e = lifecycle(&w, &c, "start").await.expect_err("unavailable");
    let msg = expect(e, StatusCode::SERVICE_UNAVAILABLE, "provider_unavailable")?;
    assert!(msg.contains("service unavailable"), "{msg}");
    // The passing failure passed: the next start works and the home is there.
    lifecycle(&w, &c, "start").await?;
    assert_eq!(w.sh(&c, "echo up").await?, "up\n");

    // Limits out of range are refused before any machine is made.
    let e = w
        .client
        .json(
            Method::POST,
            "/v1/computers",
            Some(&serde_json::json!({ "workspace": "ws-lim", "limits": { "memory_mb": 1 } })),
        )
        .await
        .expect_err("bad limits");
    let msg = expect(e, StatusCode::BAD_REQUEST, "bad_request")?;
    assert!(msg.contains("memory_mb must be between 16"), "{msg}");
    // Unknown providers are named.
    let e = w
        .client
        .json(
            Method::POST,
            "/v1/computers",
            Some(&serde_json::json!({ "workspace": "ws-p", "provider": "docker" })),
        )
        .await
        .expect_err("not configured");
    let msg = expect(e, StatusCode::BAD_REQUEST, "bad_request")?;
    assert!(msg.contains("\"docker\" is not configured"), "{msg}");
    w.allow_warn("injected");
    w.check_log()
}

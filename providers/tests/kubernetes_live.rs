//! The kubernetes provider against a real cluster: an opt-in run, never part of CI (the test
//! is compiled only with the `kubernetes-live` feature):
//!
//! ```text
//! RAKAZO_KUBECONFIG=~/.kube/config RAKAZO_KUBE_IMAGE=registry.example/rakazo-computer:TAG \
//!   cargo test -p providers --features kubernetes-live --test kubernetes_live
//! ```
//!
//! Optional: `RAKAZO_KUBE_NAMESPACE` (default `rakazo-live`, which must exist),
//! `RAKAZO_KUBE_MODE` (`pod` or `sandbox`; sandbox needs agent-sandbox's CRDs and controller),
//! `RAKAZO_KUBE_STORAGE_CLASS`, `RAKAZO_KUBE_RUNTIME_CLASS`. The guest is started but dials an
//! address nothing answers on (TEST-NET-1): the run checks the provider's lifecycle in the
//! cluster (provision, the pod running, stop keeping the claim, prepare, destroy removing
//! everything, idempotence), not the tunnel.

use providers::kubernetes::{KubeConfig, KubeMode, KubernetesProvider};
use providers::{
    GuestEnrollment, MachineLimits, MachineState, SandboxProvider, SandboxSpec, Secret,
};
use std::time::Duration;

#[allow(clippy::disallowed_methods)] // reason: the live run's settings are its environment
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn spec(id: &str) -> SandboxSpec {
    SandboxSpec {
        computer_id: id.into(),
        home_key: "team-live".into(),
        guest: GuestEnrollment {
            control_addr: "192.0.2.1:7443".parse().expect("an address"),
            control_tcp_addr: None,
            control_ws: None,
            other_replicas: Vec::new(),
            cert_sha256: "00".repeat(32),
            token: Secret(format!("live-{}", std::process::id())),
        },
        limits: MachineLimits {
            memory_mb: Some(256),
            cpu_millis: Some(250),
            pids: None,
            shm_mb: Some(64),
        },
        placement: None,
        network: Some("none".parse().expect("a policy")),
    }
}

/// Waits up to 3 minutes (image pulls) for the state `want`.
async fn wait_state(p: &KubernetesProvider, r: &providers::ProviderRef, want: MachineState) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    loop {
        let s = p.state(r).await.expect("state");
        if s == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{r}: still {s:?}, wanted {want:?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_computer_s_lifecycle_in_a_real_cluster() {
    let kubeconfig = env("RAKAZO_KUBECONFIG")
        .expect("the live run needs RAKAZO_KUBECONFIG (see this file's header)");
    let image = env("RAKAZO_KUBE_IMAGE")
        .expect("the live run needs RAKAZO_KUBE_IMAGE: an image with the guest");
    let mut c = KubeConfig::new(
        env("RAKAZO_KUBE_NAMESPACE").unwrap_or_else(|| "rakazo-live".into()),
        image,
    );
    c.kubeconfig = Some(kubeconfig.into());
    c.mode = KubeMode::parse(&env("RAKAZO_KUBE_MODE").unwrap_or_else(|| "pod".into()))
        .expect("RAKAZO_KUBE_MODE");
    c.storage_class = env("RAKAZO_KUBE_STORAGE_CLASS");
    c.runtime_class = env("RAKAZO_KUBE_RUNTIME_CLASS");
    c.stop_grace = Duration::from_secs(5);
    let p = KubernetesProvider::connect(c).await.expect("connect");
    let id = format!("c-live{:08x}", std::process::id());
    let s = spec(&id);
    let r = p.provision(&s).await.expect("provision");
    wait_state(&p, &r, MachineState::Running).await;
    // prepare on a running computer leaves it alone.
    assert_eq!(p.prepare(&r, &s).await.expect("prepare"), r);
    p.stop(&r).await.expect("stop");
    p.stop(&r).await.expect("a second stop");
    assert_eq!(p.state(&r).await.expect("state"), MachineState::Stopped);
    p.prepare(&r, &s).await.expect("start again");
    wait_state(&p, &r, MachineState::Running).await;
    p.destroy(&r).await.expect("destroy");
    p.destroy(&r).await.expect("a second destroy");
    wait_state(&p, &r, MachineState::Gone).await;
}

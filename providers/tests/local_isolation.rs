//! The local provider as root: each computer runs as its own system user.
//!
//! Runs the real guest (`rakazo-guest` beside this test's target dir: `cargo build -p
//! guest-agent --bin rakazo-guest`) with nothing to dial, so it stays up retrying, and checks
//! from outside: the guest process's uids are the computer's user, the directory layout's owners
//! and modes, that the user cannot read its own token, that a new provider (a restarted control
//! plane) finds the same user again, and that destroy removes the directory, the runtime dir and
//! the user, idempotently.
//!
//! Needs root; as another user the tests say so and pass without checking anything.

use providers::local::LocalProvider;
use providers::{
    GuestEnrollment, MachineLimits, MachineState, ProviderError, ProviderRef, SandboxProvider,
    SandboxSpec, Secret,
};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn is_root() -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    eprintln!("not root: local isolation cannot be exercised");
    false
}

/// The debug guest binary of this target dir.
fn guest_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().unwrap().parent().unwrap();
    let bin = profile.join("rakazo-guest");
    assert!(
        bin.exists(),
        "{} is missing: cargo build -p guest-agent --bin rakazo-guest",
        bin.display()
    );
    bin
}

fn spec() -> SandboxSpec {
    let nanos = std::time::SystemTime::UNIX_EPOCH
        .elapsed()
        .unwrap()
        .subsec_nanos();
    let id = format!("c-{:08x}{:08x}", std::process::id(), nanos);
    SandboxSpec {
        computer_id: id,
        home_key: "team-isolation".into(),
        guest: GuestEnrollment {
            // Nothing listens there: the guest keeps retrying, which is all these tests need.
            control_addr: "127.0.0.1:9".parse().unwrap(),
            control_tcp_addr: None,
            control_ws: None,
            other_replicas: Vec::new(),
            cert_sha256: "ab".repeat(32),
            token: Secret("isolation-token".into()),
        },
        limits: MachineLimits::default(),
        placement: None,
        network: None,
    }
}

/// A 0711 root-owned scratch dir users can pass through, holding the local root.
fn scratch() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("rakazo-local-isolation-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    dir
}

fn pid_of(r: &ProviderRef) -> i32 {
    r.0.split(':').nth(1).unwrap().parse().unwrap()
}

fn uids_of(pid: i32) -> Option<Vec<u32>> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    Some(
        line.split_whitespace()
            .filter_map(|v| v.parse().ok())
            .collect(),
    )
}

/// The process started for `r` and everything below it (a contained guest runs under its jail,
/// `ip netns exec` then bubblewrap, which stay root's).
fn tree_of(r: &ProviderRef) -> Vec<i32> {
    let mut tree = vec![pid_of(r)];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                continue;
            };
            let ppid = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit_once(')')?
                        .1
                        .split_whitespace()
                        .nth(1)?
                        .parse()
                        .ok()
                });
            if ppid == Some(parent) && !tree.contains(&pid) {
                tree.push(pid);
            }
        }
        i += 1;
    }
    tree
}

/// The guest process of `r`: the one named `rakazo-guest` in its tree.
fn guest_of(r: &ProviderRef) -> Option<i32> {
    tree_of(r).into_iter().find(|p| {
        std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "rakazo-guest")
    })
}

/// Waits until the guest of `r` has dropped to `uid`.
async fn wait_dropped(r: &ProviderRef, uid: u32) {
    for _ in 0..500 {
        if guest_of(r).and_then(uids_of) == Some(vec![uid; 4]) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "the guest of {r:?} never ran as uid {uid}: {:?}",
        guest_of(r).and_then(uids_of)
    );
}

fn owner_mode(p: &Path) -> (u32, u32) {
    let m = std::fs::symlink_metadata(p).unwrap();
    (m.uid(), m.mode() & 0o7777)
}

fn user(name: &str) -> Option<nix::unistd::User> {
    nix::unistd::User::from_name(name).unwrap()
}

#[tokio::test]
async fn each_computer_runs_as_its_own_user_until_destroyed() {
    if !is_root() {
        return;
    }
    let scratch = scratch();
    let root = scratch.path().join("local");
    let local = LocalProvider::new(&root, guest_bin());
    assert!(local.is_isolated());
    let spec = spec();
    let id = spec.computer_id.clone();
    let name = LocalProvider::user_name(&id);
    let r = local.provision(&spec).await.unwrap();

    let u = user(&name).expect("the computer's user exists");
    let uid = u.uid.as_raw();
    assert!(uid >= 2_000_000, "uid {uid} outside the computers' range");
    assert_eq!(u.gid.as_raw(), uid, "its own group, numbered as the uid");
    assert_eq!(u.dir, local.home_dir(&id));
    wait_dropped(&r, uid).await;

    let dir = root.join(&id);
    assert_eq!(owner_mode(&root), (0, 0o711));
    assert_eq!(owner_mode(&dir), (uid, 0o700));
    assert_eq!(owner_mode(&dir.join("home")), (uid, 0o700));
    assert_eq!(owner_mode(&dir.join("guest.log")), (0, 0o600));
    // The runtime dir is in the computer's own /tmp (seen through the guest's root; `/` when
    // the computer is not jailed).
    let guest = guest_of(&r).expect("the guest runs");
    let runtime = PathBuf::from(format!("/proc/{guest}/root"))
        .join(std::env::temp_dir().strip_prefix("/").unwrap())
        .join(format!("rakazo-guest-{id}"));
    assert_eq!(owner_mode(&runtime), (uid, 0o700));
    // The guest read its enrollment token (root's 0600 file) while root and removed it before
    // dropping: it is not on disk for the user's commands to find.
    assert!(
        !dir.join("token").exists(),
        "the token file outlived the guest's start"
    );

    // A restarted control plane (a new provider) finds the same user again.
    local.stop(&r).await.unwrap();
    assert_eq!(local.state(&r).await.unwrap(), MachineState::Stopped);
    assert!(
        !runtime.exists(),
        "a stopped computer left its runtime dir (X cookies, sockets) behind"
    );
    let restarted = LocalProvider::new(&root, guest_bin());
    let r2 = restarted.prepare(&r, &spec).await.unwrap();
    assert_ne!(r2, r);
    assert_eq!(user(&name).unwrap().uid.as_raw(), uid);
    wait_dropped(&r2, uid).await;

    restarted.destroy(&r2).await.unwrap();
    assert!(!dir.exists());
    assert!(!runtime.exists());
    assert!(user(&name).is_none(), "{name} still exists");
    assert!(uids_of(pid_of(&r2)).is_none(), "the guest still runs");
    assert_eq!(restarted.state(&r2).await.unwrap(), MachineState::Gone);
    // Idempotent.
    restarted.destroy(&r2).await.unwrap();
}

#[tokio::test]
async fn a_root_no_user_can_reach_is_refused_clearly() {
    if !is_root() {
        return;
    }
    let private = tempfile::tempdir().unwrap();
    std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let local = LocalProvider::new(private.path().join("computers"), guest_bin());
    let spec = spec();
    let err = local.provision(&spec).await.unwrap_err();
    assert!(matches!(err, ProviderError::BadSpec(_)), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("cannot be passed through") && msg.contains("--local-root"),
        "{msg}"
    );
    assert!(user(&LocalProvider::user_name(&spec.computer_id)).is_none());
}

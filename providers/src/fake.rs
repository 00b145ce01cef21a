//! The `fake` provider, for tests of the control plane: a pretend cloud whose machines are
//! records in memory, with failures on demand.
//!
//! A fake machine is a reference `fake-<computer id>-<n>` and a directory `<root>/<ref>/`
//! holding its home. When a guest binary is configured, a running machine runs the real guest as
//! a child of this host (same user, no isolation: never use it outside tests), so exec, files
//! and desktops work; without one, nothing dials in and only the lifecycle is exercised.
//!
//! Two knobs drive the control plane's error handling from outside the process:
//! - removing `<root>/<ref>/` makes the machine gone (as a cloud that lost it would);
//! - a line `<op> <class>` in `<root>/faults` (op: provision, prepare, state, stop, destroy;
//!   class: gone, capacity, transient, invalid) makes the next call of that operation fail with
//!   that class; each line is used once. Class `hang` makes that call never return, as a cloud
//!   call stuck mid-way: a test kills the control plane under it. Class `hold` makes that call
//!   create `<root>/held-<op>` and wait until the test removes it (at most [`HOLD_MAX`]), then
//!   proceed as usual: a test acts while the call is under way, deterministically.
//!
//! Machine records live in memory only, so a restarted control plane finds every fake machine
//! gone and replaces it: the provider-reference-is-not-durable rule, exercised on every restart.

use crate::process::{self, spawn_guest, GuestLaunch};
use crate::{ErrorClass, MachineState, ProviderError, ProviderRef, SandboxProvider, SandboxSpec};
use std::collections::HashMap;
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

const STOP_GRACE: Duration = Duration::from_secs(20);
/// The longest a `hold` fault holds its call.
pub const HOLD_MAX: Duration = Duration::from_secs(120);

/// A machine the fake cloud knows.
#[derive(Debug, Clone)]
struct Machine {
    started: bool,
    /// The running guest's pid and start time.
    guest: Option<(i32, u64)>,
}

/// The in-memory fake cloud.
pub struct FakeProvider {
    root: PathBuf,
    guest_bin: Option<PathBuf>,
    guest_env: Vec<(String, String)>,
    machines: Mutex<HashMap<String, Machine>>,
    next: AtomicU64,
}

impl FakeProvider {
    /// Machines' directories live under `root`; with `guest_bin`, running machines run it.
    pub fn new(root: impl Into<PathBuf>, guest_bin: Option<PathBuf>) -> Self {
        Self {
            root: root.into(),
            guest_bin,
            guest_env: Vec::new(),
            machines: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
        }
    }

    /// Adds a variable to every guest's environment.
    pub fn with_guest_env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.guest_env.push((key.into(), value.into()));
        self
    }

    /// The directory of the machine behind `r` (its home is `home/` inside).
    pub fn machine_dir(&self, r: &ProviderRef) -> PathBuf {
        self.root.join(&r.0)
    }

    /// Makes the next call of `op` fail with `class` (what the `faults` file does).
    pub fn inject(&self, op: &str, class: ErrorClass) -> std::io::Result<()> {
        use std::io::Write;
        std::fs::create_dir_all(&self.root)?;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.root.join("faults"))?;
        writeln!(f, "{op} {}", class.as_str())
    }

    /// Takes the first fault queued for `op`, if any; `hang` never returns.
    async fn fault(&self, op: &str) -> Result<(), ProviderError> {
        let path = self.root.join("faults");
        let Ok(text) = std::fs::read_to_string(&path) else {
            return Ok(());
        };
        let mut lines: Vec<&str> = text.lines().collect();
        let Some(i) = lines
            .iter()
            .position(|l| l.split_whitespace().next() == Some(op))
        else {
            return Ok(());
        };
        let class = lines.remove(i).split_whitespace().nth(1).unwrap_or("");
        let rest: String = lines.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(&path, rest).map_err(|e| ProviderError::io("rewrite fake faults", e))?;
        let context = format!("fake {op}");
        if class == "hang" {
            tracing::info!(op, "fake provider call hangs (injected)");
            std::future::pending::<()>().await;
        }
        if class == "hold" {
            let held = self.root.join(format!("held-{op}"));
            std::fs::write(&held, b"").map_err(|e| ProviderError::io("write fake hold", e))?;
            tracing::info!(
                op,
                "fake provider call held until its file is removed (injected)"
            );
            let deadline = tokio::time::Instant::now() + HOLD_MAX;
            while held.exists() && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            return Ok(());
        }
        Err(match class {
            "gone" => ProviderError::NotFound(ProviderRef(format!("fake-{op}"))),
            "capacity" => ProviderError::Capacity(format!("{context}: no capacity (injected)")),
            "transient" => ProviderError::Unavailable {
                context,
                message: "service unavailable (injected)".into(),
            },
            _ => ProviderError::BadSpec(format!("{context}: refused (injected)")),
        })
    }

    fn exists(&self, r: &ProviderRef) -> bool {
        self.machines
            .lock()
            .expect("fake machines")
            .contains_key(&r.0)
            && self.machine_dir(r).is_dir()
    }

    fn running(&self, r: &ProviderRef) -> bool {
        let machine = self
            .machines
            .lock()
            .expect("fake machines")
            .get(&r.0)
            .cloned();
        match machine {
            Some(Machine {
                started: true,
                guest: Some((pid, start)),
            }) => process::start_time(pid) == Some(start),
            // Without a guest binary a started machine is running by record.
            Some(Machine {
                started,
                guest: None,
            }) => started,
            _ => false,
        }
    }

    fn boot(&self, r: &ProviderRef, spec: &SandboxSpec) -> Result<(), ProviderError> {
        let dir = self.machine_dir(r);
        let home = dir.join("home");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&home)
            .map_err(|e| ProviderError::io(format!("create {}", home.display()), e))?;
        let guest = match &self.guest_bin {
            Some(bin) => Some(spawn_guest(&GuestLaunch {
                bin,
                argv: None,
                spec,
                dir: &dir,
                home: &home,
                extra_env: &self.guest_env,
            })?),
            None => None,
        };
        self.machines.lock().expect("fake machines").insert(
            r.0.clone(),
            Machine {
                started: true,
                guest,
            },
        );
        Ok(())
    }

    async fn halt(&self, r: &ProviderRef) {
        let guest = self
            .machines
            .lock()
            .expect("fake machines")
            .get_mut(&r.0)
            .and_then(|m| {
                m.started = false;
                m.guest.take()
            });
        if let Some((pid, start)) = guest {
            process::kill_tree(pid, start, STOP_GRACE, None).await;
        }
        if let Some((computer, _)) = r.0.strip_prefix("fake-").and_then(|s| s.rsplit_once('-')) {
            // A fake ref is `fake-<computer>-<n>`: the guest's runtime dir goes with the machine.
            let dir = process::runtime_dir(computer);
            if let Err(e) = process::remove_dir(&dir) {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot remove a stopped guest's runtime dir");
            }
        }
    }
}

fn check_ref(r: &ProviderRef) -> Result<(), ProviderError> {
    let ok = r.0.starts_with("fake-")
        && r.0.len() <= 160
        && r.0
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(ProviderError::BadRef(r.0.clone()))
    }
}

impl Drop for FakeProvider {
    /// The fake cloud ends with its process: its guests go too.
    fn drop(&mut self) {
        let machines = self
            .machines
            .get_mut()
            .map(std::mem::take)
            .unwrap_or_default();
        for (_, m) in machines {
            if let Some((pid, start)) = m.guest {
                if process::start_time(pid) == Some(start) {
                    for p in process::descendants(pid) {
                        process::signal(p, libc::SIGKILL);
                    }
                    process::signal(pid, libc::SIGKILL);
                }
            }
        }
    }
}

impl SandboxProvider for FakeProvider {
    fn kind(&self) -> &'static str {
        "fake"
    }

    /// Pretends to be metered, so the billed idle policy is exercised too.
    fn bills_while_running(&self) -> bool {
        true
    }

    async fn provision(&self, spec: &SandboxSpec) -> Result<ProviderRef, ProviderError> {
        self.fault("provision").await?;
        crate::check_spec_placement(self, spec)?;
        spec.limits.validate().map_err(ProviderError::BadSpec)?;
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let r = ProviderRef(format!("fake-{}-{n}", spec.computer_id));
        check_ref(&r)?;
        self.boot(&r, spec)?;
        Ok(r)
    }

    async fn prepare(
        &self,
        r: &ProviderRef,
        spec: &SandboxSpec,
    ) -> Result<ProviderRef, ProviderError> {
        self.fault("prepare").await?;
        check_ref(r)?;
        if !self.exists(r) {
            return Err(ProviderError::NotFound(r.clone()));
        }
        if !self.running(r) {
            self.boot(r, spec)?;
        }
        Ok(r.clone())
    }

    async fn state(&self, r: &ProviderRef) -> Result<MachineState, ProviderError> {
        self.fault("state").await?;
        check_ref(r)?;
        Ok(if !self.exists(r) {
            MachineState::Gone
        } else if self.running(r) {
            MachineState::Running
        } else {
            MachineState::Stopped
        })
    }

    async fn stop(&self, r: &ProviderRef) -> Result<(), ProviderError> {
        self.fault("stop").await?;
        check_ref(r)?;
        self.halt(r).await;
        Ok(())
    }

    async fn destroy(&self, r: &ProviderRef) -> Result<(), ProviderError> {
        self.fault("destroy").await?;
        check_ref(r)?;
        self.halt(r).await;
        self.machines.lock().expect("fake machines").remove(&r.0);
        process::remove_dir(&self.machine_dir(r))
    }
}

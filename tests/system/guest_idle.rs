//! Idle judged with what the guest sees, and the guest's machine report, through the real
//! control plane and guest: work left running in the background (`nohup … &`) keeps a computer
//! up past its idle timeout until it ends, or until the background maximum passes; `rakazo
//! computer show` prints the machine's load, memory, the home's use and the live desktops.
//!
//! Nothing passes or fails on how long something took: the tests wait (with generous bounds) for
//! what the idle job reports in `GET /v1/computers/{id}` and for state changes.

use anyhow::{anyhow, bail, ensure, Context, Result};
use std::process::Stdio;
use std::time::Duration;
use tests::bot::Bot;
use tests::{pids_with_cmdline, World, WorldOptions};

/// Upper bound for anything the idle job is expected to do (it looks every few hundred ms).
const WAIT: Duration = Duration::from_secs(90);

async fn wait_view(
    w: &World,
    c: &str,
    what: &str,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> Result<serde_json::Value> {
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut last = serde_json::Value::Null;
    while tokio::time::Instant::now() < deadline {
        last = w.show(c).await?;
        if pred(&last) {
            return Ok(last);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("timed out waiting for {what}; last view: {last}")
}

fn decision(v: &serde_json::Value) -> &str {
    v["idle"]["decision"].as_str().unwrap_or("")
}

fn reason(v: &serde_json::Value) -> &str {
    v["idle"]["reason"].as_str().unwrap_or("")
}

fn world(idle_secs: u64, background_max_secs: Option<u64>) -> WorldOptions {
    WorldOptions {
        idle_timeout_secs: Some(idle_secs),
        env: background_max_secs
            .map(|s| vec![("RAKAZO_IDLE_BACKGROUND_MAX_SECS".to_string(), s.to_string())])
            .unwrap_or_default(),
        ..Default::default()
    }
}

/// Starts `sleep <secs>` in the background of a command that ends at once (its output
/// redirected, as a person does with `nohup … &`); returns its pid.
/// Starts `sleep <secs>` in the background of a command; its pid on this host (inside a jail,
/// `$!` is the computer's own pid, not this host's).
async fn background_sleep(w: &World, c: &str, secs: &str) -> Result<i32> {
    w.sh(c, &format!("nohup sleep {secs} >/dev/null 2>&1 &"))
        .await?;
    match pids_with_cmdline(&format!("sleep {secs}")).as_slice() {
        [pid] => Ok(*pid),
        other => bail!("expected one `sleep {secs}`, found {other:?}"),
    }
}

/// Kills what a test left (the background sleeps outlive a stopped local computer's guest).
fn kill_all(cmdline: &str) {
    for pid in pids_with_cmdline(cmdline) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// A background process a finished command left keeps the computer up past its idle timeout
/// (the job reports it busy with what the guest saw); once it ends, the computer suspends.
#[tokio::test(flavor = "multi_thread")]
async fn background_work_keeps_a_computer_up_until_it_ends() -> Result<()> {
    let mut w = World::start_with(world(2, None)).await?;
    let c = w.create_computer("ws-bg-work").await?;
    let secs = "613.25";
    let pid = background_sleep(&w, &c, secs).await?;
    let busy = wait_view(&w, &c, "the background work to keep it busy", |v| {
        decision(v) == "busy" && reason(v).contains("1 background process(es) left by commands")
    })
    .await?;
    assert_eq!(busy["state"], "running", "{busy}");
    assert!(reason(&busy).starts_with("working inside: "), "{busy}");
    // Still up a few looks later (the job looks every half second).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let still = w.show(&c).await?;
    assert_eq!(still["state"], "running", "{still}");
    assert_eq!(decision(&still), "busy", "{still}");

    // The work ends (killed from outside: no API use restarts the idle timer).
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )?;
    let stopped = wait_view(&w, &c, "the computer to suspend", |v| {
        v["state"] == "stopped" && decision(v) == "suspended"
    })
    .await?;
    assert_eq!(decision(&stopped), "suspended", "{stopped}");
    kill_all(&format!("sleep {secs}"));
    w.check_log()
}

/// Background work keeps a computer up only until the background maximum after its last use:
/// a process still running past it does not stop the suspension.
#[tokio::test(flavor = "multi_thread")]
async fn background_work_past_its_maximum_lifetime_is_suspended() -> Result<()> {
    let mut w = World::start_with(world(2, Some(6))).await?;
    let c = w.create_computer("ws-bg-max").await?;
    let secs = "617.75";
    let pid = background_sleep(&w, &c, secs).await?;
    wait_view(&w, &c, "the background work to keep it busy", |v| {
        decision(v) == "busy" && reason(v).contains("background process")
    })
    .await?;
    // A jailed computer's processes (their pid namespace is the computer's own) all end with
    // its suspension; an unjailed one's background work outlives it.
    let jailed = std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
        s.lines()
            .any(|l| l.starts_with("NSpid:") && l.split_whitespace().count() > 2)
    });
    let stopped = wait_view(&w, &c, "the computer to suspend anyway", |v| {
        v["state"] == "stopped" && decision(v) == "suspended"
    })
    .await?;
    assert_eq!(stopped["state"], "stopped");
    let log = w.log();
    let cut = log
        .lines()
        .find(|l| l.contains("past the background maximum"))
        .ok_or_else(|| anyhow!("no background-maximum line in the log"))?;
    assert!(cut.contains("background process"), "{cut}");
    // The work was still running when the computer was suspended: the maximum cut it off.
    let alive = std::path::Path::new(&format!("/proc/{pid}")).exists();
    kill_all(&format!("sleep {secs}"));
    ensure!(
        alive || jailed,
        "the background sleep ended before the suspension"
    );
    w.check_log()
}

/// `rakazo computer show`, through the CLI: the machine's load, memory, the home's use (which
/// grows by a file the test writes) and the live desktops (two bots with screens: 2).
#[tokio::test(flavor = "multi_thread")]
async fn computer_show_prints_load_memory_home_use_and_desktops() -> Result<()> {
    let mut w = World::start().await?;
    let c = w.create_computer("ws-show-machine").await?;
    let a = Bot::new(&w, &c, "show-a").await?;
    let b = Bot::new(&w, &c, "show-b").await?;
    a.ensure().await?;
    b.ensure().await?;
    // 8 MiB of real blocks in the home.
    w.sh(&c, "head -c 8388608 /dev/urandom > big.bin && sync big.bin")
        .await?;

    let text = cli(&w, &["computer", "show", &c]).await?;
    let lines: Vec<&str> = text.lines().collect();
    ensure!(lines.len() == 5, "five lines expected:\n{text}");
    assert!(
        lines[1].starts_with("\tup ") && lines[1].contains("\tload "),
        "{text}"
    );
    assert!(lines[1].contains(" CPUs\thome "), "{text}");
    assert!(lines[2].starts_with("\tmemory   "), "{text}");
    assert!(lines[2].contains(" available of "), "{text}");
    assert!(lines[3].starts_with("\thome use "), "{text}");
    assert!(lines[3].ends_with(" in its files"), "{text}");
    assert_eq!(lines[4], "\tdesktops 2 live", "{text}");

    let shown: serde_json::Value =
        serde_json::from_str(&cli(&w, &["computer", "show", &c, "--json"]).await?)?;
    let m = &shown["machine"];
    assert_eq!(m["desktops"], 2, "{shown}");
    let used = m["home_used_bytes"].as_u64().context("home_used_bytes")?;
    assert!(used >= 8 << 20, "the 8 MiB file counts: {shown}");
    assert_eq!(m["home_used_partial"], false, "{shown}");
    // Memory: the host's (a local computer), as /proc/meminfo says.
    let meminfo = std::fs::read_to_string("/proc/meminfo")?;
    let total_kb: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("MemTotal")?;
    let total = m["memory_total_bytes"].as_u64().context("memory total")?;
    let available = m["memory_available_bytes"].as_u64().context("available")?;
    assert!(total <= total_kb * 1024 && total > 0, "{shown}");
    assert!(available <= total && available > 0, "{shown}");
    assert_eq!(m["load"].as_array().map(Vec::len), Some(3), "{shown}");

    // One desktop released: one live.
    b.release().await?;
    let shown: serde_json::Value =
        serde_json::from_str(&cli(&w, &["computer", "show", &c, "--json"]).await?)?;
    assert_eq!(shown["machine"]["desktops"], 1, "{shown}");
    a.release().await?;
    w.check_log()
}

/// `rakazo <args>` against `w`, which must succeed; its stdout.
async fn cli(w: &World, args: &[&str]) -> Result<String> {
    let out = tokio::process::Command::new(tests::bin("rakazo"))
        .args(args)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("RAKAZO_URL", &w.http)
        .env("RAKAZO_TOKEN", w.api_token())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), out)
        .await
        .map_err(|_| anyhow!("rakazo {args:?} did not finish"))??;
    ensure!(
        out.status.success(),
        "rakazo {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

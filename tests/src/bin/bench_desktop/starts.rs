//! Part 3 of `bench_desktop`: desktop cold starts (X server, then Chromium until CDP answers) on
//! Xvnc and Xvfb, fresh and warm profiles.

use super::*;

#[derive(Default)]
pub(super) struct Starts {
    pub(super) total: Vec<Duration>,
    pub(super) xserver: Vec<Duration>,
    pub(super) browser: Vec<Duration>,
    /// Chrome's own spawn-to-CDP figure (`Browser::startup_time`).
    pub(super) chrome: Vec<Duration>,
    pub(super) stop: Vec<Duration>,
    /// The X server's VmRSS and PSS once Chrome answers CDP (KiB).
    pub(super) rss_kb: Vec<usize>,
    pub(super) pss_kb: Vec<usize>,
}

/// The cold starts of one X server kind.
pub(super) struct KindStarts {
    pub(super) kind: XServerKind,
    pub(super) fresh: Starts,
    pub(super) warm: Starts,
}

/// One start and stop of an X server of `kind` plus Chromium on `profile`.
async fn start_once(
    kind: XServerKind,
    runtime: &Path,
    home: &Path,
    profile: &Path,
    s: &mut Starts,
) -> Result<()> {
    let t0 = now();
    let mut xserver = start_xserver(runtime, kind).await?;
    let t1 = now();
    let started = Browser::start(&browser_options(
        &xserver,
        profile.to_path_buf(),
        home,
        runtime,
    ))
    .await;
    let t2 = now();
    let mut browser = match started {
        Ok(b) => b,
        Err(e) => {
            let _ = xserver.stop().await;
            return Err(e).context("start chromium");
        }
    };
    let pid = i32::try_from(xserver.pid()).unwrap_or(0);
    s.rss_kb
        .push(usize::try_from(proc_kb(pid, "status", "VmRSS:")).unwrap_or(0));
    s.pss_kb
        .push(usize::try_from(proc_kb(pid, "smaps_rollup", "Pss:")).unwrap_or(0));
    let t3 = now();
    let stopped_b = browser.stop().await;
    let stopped_x = xserver.stop().await;
    s.stop.push(now() - t3);
    stopped_b.context("stop chromium")?;
    stopped_x.context("stop the x server")?;
    s.total.push(t2 - t0);
    s.xserver.push(t1 - t0);
    s.browser.push(t2 - t1);
    s.chrome.push(browser.startup_time());
    Ok(())
}

/// Part 3: `runs` starts on fresh profiles, then `runs` on one warm profile, each on Xvnc and
/// on Xvfb in alternation (so passing load hits both alike).
pub(super) async fn measure_starts(runs: usize) -> Result<[KindStarts; 2]> {
    let runtime = private_dir("rakazo-bench-start-rt-")?;
    let home = private_dir("rakazo-bench-start-home-")?;
    let mut kinds = [XServerKind::Xvnc, XServerKind::Xvfb].map(|kind| KindStarts {
        kind,
        fresh: Starts::default(),
        warm: Starts::default(),
    });
    for i in 0..runs {
        for k in &mut kinds {
            let profile = home.path().join(format!("fresh-{}-{i}", k.kind.program()));
            start_once(k.kind, runtime.path(), home.path(), &profile, &mut k.fresh).await?;
        }
    }
    let warm_profile = home.path().join("warm");
    // The priming run creates the profile; it is not counted.
    start_once(
        XServerKind::Xvnc,
        runtime.path(),
        home.path(),
        &warm_profile,
        &mut Starts::default(),
    )
    .await?;
    for _ in 0..runs {
        for k in &mut kinds {
            start_once(
                k.kind,
                runtime.path(),
                home.path(),
                &warm_profile,
                &mut k.warm,
            )
            .await?;
        }
    }
    Ok(kinds)
}

// ---------------------------------------------------------------------------------------------
// The API: a control plane from the built binaries, with one local computer.

//! Parts 1 and 2 of `bench_desktop`: computer_observe, clicks, click batches and the act's settle,
//! measured on one local display against their anchors.

use super::*;

pub(super) struct ObserveRuns {
    pub(super) display: String,
    pub(super) shm: bool,
    pub(super) still: bool,
    pub(super) observe: Vec<Duration>,
    pub(super) observe_png: Vec<usize>,
    pub(super) capture: Vec<Duration>,
    pub(super) encode: Vec<Duration>,
    pub(super) hash: Vec<Duration>,
    pub(super) cursor: Vec<Duration>,
    pub(super) window: Vec<Duration>,
    pub(super) import: Vec<Duration>,
    pub(super) import_png: Vec<usize>,
    pub(super) scrot: Vec<Duration>,
    pub(super) scrot_png: Vec<usize>,
    pub(super) scrot_dir: String,
    pub(super) click: Vec<Duration>,
    pub(super) xdotool: Vec<Duration>,
    /// Spawning `true` with the same environment: the floor under every process anchor.
    pub(super) spawn: Vec<Duration>,
    /// One bare X round trip (QueryPointer) right after each back-to-back click: the floor
    /// under a click.
    pub(super) round_trip: Vec<Duration>,
    /// A click, and a bare round trip, each after [`ISOLATION`] without input.
    pub(super) click_isolated: Vec<Duration>,
    /// Isolated clicks on the same display before Chromium started (no client reacts).
    pub(super) click_empty: Vec<Duration>,
    pub(super) round_trip_isolated: Vec<Duration>,
    /// [`BATCH`] clicks, each ended by `Input::finish` (a sync per action).
    pub(super) batch_per_action: Vec<Duration>,
    /// [`BATCH`] clicks, then one `Input::finish`.
    pub(super) batch_once: Vec<Duration>,
    /// Syncs the last one-sync batch made.
    pub(super) batch_syncs: u64,
    /// Arm, click on the counter, finish, settle: the act's X side.
    pub(super) settle_total: Vec<Duration>,
    /// From the start of the settle wait to the first damage, where there was one.
    pub(super) first_damage: Vec<Duration>,
    /// Settles that saw no damage within the bound.
    pub(super) no_damage: usize,
    /// The settler's round trips in the last settle.
    pub(super) settle_arms: u64,
    /// Load average when the observe, click, batch and settle rounds began.
    pub(super) load_observe: String,
    pub(super) load_click: String,
    pub(super) load_batch: String,
    pub(super) load_settle: String,
}

/// Parts 1 and 2: observe and click on one display, against their process anchors.
pub(super) async fn measure_local(fx: &Fixture, opts: &Options) -> Result<ObserveRuns> {
    let runtime = private_dir("rakazo-bench-desk-rt-")?;
    let home = private_dir("rakazo-bench-desk-home-")?;
    // scrot writes a file: keep it in tmpfs, so its figure is encode time, not disk time.
    let shm = Path::new("/dev/shm");
    let scrot_dir = if shm.is_dir() {
        tempfile::Builder::new()
            .prefix("rakazo-bench-scrot-")
            .tempdir_in(shm)?
    } else {
        private_dir("rakazo-bench-scrot-")?
    };
    let shot = scrot_dir.path().join("shot.png");

    let mut xserver = start_xserver(runtime.path(), XServerKind::Xvnc).await?;
    // Isolated clicks on the display before Chromium runs: what a click costs when no client
    // reacts to it.
    let click_empty = async {
        let mut input = Input::new(xserver.access(), Clock::new(now))?;
        let (bx, by) = BLANK_POINT;
        let mut v = Vec::new();
        for i in 0..opts.click_runs + 20 {
            tokio::time::sleep(ISOLATION).await;
            let t = now();
            input.click(bx, by, Button::Left, false)?;
            input.finish()?;
            if i >= 20 {
                v.push(now() - t);
            }
        }
        Ok::<_, anyhow::Error>(v)
    }
    .await;
    let click_empty = match click_empty {
        Ok(v) => v,
        Err(e) => {
            let _ = xserver.stop().await;
            return Err(e).context("clicks on the empty display");
        }
    };
    let mut opts_b = browser_options(
        &xserver,
        home.path().join("profile"),
        home.path(),
        runtime.path(),
    );
    opts_b.first_url = Some(fx.page("local", &page_html("local")));
    let mut browser = match Browser::start(&opts_b).await {
        Ok(b) => b,
        Err(e) => {
            let _ = xserver.stop().await;
            return Err(e).context("start chromium");
        }
    };
    let result = async {
        wait_loaded(fx, "local").await?;
        let mut cap = Capturer::new(xserver.access())?;
        let still = wait_still(&mut cap, 5, Duration::from_secs(20)).await?;
        let display = xserver.display_env();
        eprintln!(
            "observe and click on {display} (MIT-SHM: {})",
            cap.uses_shm()
        );

        let observe_once = |cap: &mut Capturer| -> Result<(Duration, usize)> {
            let t = now();
            let obs = cap.observe()?;
            let d = now() - t;
            ensure!(
                (obs.width, obs.height) == (1280, 800) && obs.png.starts_with(PNG_MAGIC),
                "observe gave a {}x{} frame",
                obs.width,
                obs.height
            );
            Ok((d, obs.png.len()))
        };
        let import_once = || -> Result<(Duration, usize)> {
            let t = now();
            let out = x_command("import", &xserver, home.path())
                .args(["-window", "root", "png:-"])
                .output()
                .context("run import")?;
            let d = now() - t;
            ensure!(
                out.status.success() && out.stdout.starts_with(PNG_MAGIC),
                "import failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            Ok((d, out.stdout.len()))
        };
        let scrot_once = || -> Result<(Duration, usize)> {
            let t = now();
            let out = x_command("scrot", &xserver, home.path())
                .args(["-o", "-z"])
                .arg(&shot)
                .output()
                .context("run scrot")?;
            let d = now() - t;
            ensure!(
                out.status.success(),
                "scrot failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            let len = std::fs::metadata(&shot)?.len();
            Ok((d, usize::try_from(len)?))
        };

        // Warm-up: the first capture maps the segment, the first spawns fault the tools in.
        for _ in 0..10 {
            observe_once(&mut cap)?;
        }
        import_once()?;
        scrot_once()?;
        let mut r = ObserveRuns {
            display: display.clone(),
            shm: cap.uses_shm(),
            still,
            observe: Vec::new(),
            observe_png: Vec::new(),
            capture: Vec::new(),
            encode: Vec::new(),
            hash: Vec::new(),
            cursor: Vec::new(),
            window: Vec::new(),
            import: Vec::new(),
            import_png: Vec::new(),
            scrot: Vec::new(),
            scrot_png: Vec::new(),
            scrot_dir: format!(
                "{} ({})",
                scrot_dir.path().display(),
                fs_type(scrot_dir.path()).unwrap_or_default()
            ),
            click: Vec::new(),
            xdotool: Vec::new(),
            spawn: Vec::new(),
            round_trip: Vec::new(),
            click_isolated: Vec::new(),
            click_empty: click_empty.clone(),
            round_trip_isolated: Vec::new(),
            batch_per_action: Vec::new(),
            batch_once: Vec::new(),
            batch_syncs: 0,
            settle_total: Vec::new(),
            first_damage: Vec::new(),
            no_damage: 0,
            settle_arms: 0,
            load_observe: loadavg(),
            load_click: String::new(),
            load_batch: String::new(),
            load_settle: String::new(),
        };
        // Interleaved rounds: a share of the observes, as many observes split into their steps
        // (timed one by one), one import, one scrot.
        let per_round = opts.observe_runs / opts.anchor_runs;
        for round in 0..opts.anchor_runs {
            let extra = usize::from(round < opts.observe_runs % opts.anchor_runs);
            for _ in 0..per_round + extra {
                let (d, len) = observe_once(&mut cap)?;
                r.observe.push(d);
                r.observe_png.push(len);
            }
            for _ in 0..per_round + extra {
                let t0 = now();
                let frame = cap.capture()?;
                let t1 = now();
                let png = capture::encode_png(&frame)?;
                let t2 = now();
                let id = capture::frame_id(&png);
                let t3 = now();
                cap.cursor()?;
                let t4 = now();
                cap.active_window()?;
                let t5 = now();
                ensure!(id.len() == 64, "frame id {id:?}");
                r.capture.push(t1 - t0);
                r.encode.push(t2 - t1);
                r.hash.push(t3 - t2);
                r.cursor.push(t4 - t3);
                r.window.push(t5 - t4);
            }
            let (d, len) = import_once()?;
            r.import.push(d);
            r.import_png.push(len);
            let (d, len) = scrot_once()?;
            r.scrot.push(d);
            r.scrot_png.push(len);
        }

        // Clicks on a blank spot of the page, interleaved with `xdotool click 1` there.
        let mut input = Input::new(xserver.access(), Clock::new(now))?;
        let (bx, by) = BLANK_POINT;
        for _ in 0..20 {
            input.click(bx, by, Button::Left, false)?;
            input.finish()?;
        }
        let xdotool_once = || -> Result<Duration> {
            let t = now();
            let out = x_command("xdotool", &xserver, home.path())
                .args(["click", "1"])
                .output()
                .context("run xdotool")?;
            let d = now() - t;
            ensure!(
                out.status.success(),
                "xdotool failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            Ok(d)
        };
        for _ in 0..3 {
            xdotool_once()?;
        }
        r.load_click = loadavg();
        let per_round = opts.click_runs / opts.xdotool_runs;
        for round in 0..opts.xdotool_runs {
            let extra = usize::from(round < opts.click_runs % opts.xdotool_runs);
            for _ in 0..per_round + extra {
                let t = now();
                input.click(bx, by, Button::Left, false)?;
                input.finish()?;
                r.click.push(now() - t);
                let t = now();
                cap.cursor()?;
                r.round_trip.push(now() - t);
            }
            for _ in 0..per_round + extra {
                tokio::time::sleep(ISOLATION).await;
                let t = now();
                input.click(bx, by, Button::Left, false)?;
                input.finish()?;
                r.click_isolated.push(now() - t);
                tokio::time::sleep(ISOLATION).await;
                let t = now();
                cap.cursor()?;
                r.round_trip_isolated.push(now() - t);
            }
            r.xdotool.push(xdotool_once()?);
            let t = now();
            let status = x_command("true", &xserver, home.path())
                .status()
                .context("run true")?;
            r.spawn.push(now() - t);
            ensure!(status.success(), "true failed: {status}");
        }
        // Batches of clicks on the blank spot: one sync per action (as every action ended
        // before issue 17) against one sync per batch (`Input::finish` once), interleaved.
        r.load_batch = loadavg();
        for _ in 0..opts.batch_runs {
            tokio::time::sleep(ISOLATION).await;
            let t = now();
            for _ in 0..BATCH {
                input.click(bx, by, Button::Left, false)?;
                input.finish()?;
            }
            r.batch_per_action.push(now() - t);
            tokio::time::sleep(ISOLATION).await;
            let syncs = input.syncs();
            let t = now();
            for _ in 0..BATCH {
                input.click(bx, by, Button::Left, false)?;
            }
            input.finish()?;
            r.batch_once.push(now() - t);
            r.batch_syncs = input.syncs() - syncs;
        }

        // Settling after a click on the counter bar, as `act` does: arm, click, one sync, then
        // the first damage (within the bound), then the quiet period.
        let mut settler = Settler::new(xserver.access(), Clock::new(now))?;
        let (ux, uy) = BUMP_POINT;
        r.load_settle = loadavg();
        for _ in 0..opts.settle_runs {
            tokio::time::sleep(ISOLATION).await;
            let arms = settler.round_trips();
            let t = now();
            settler.arm()?;
            input.click(ux, uy, Button::Left, false)?;
            input.finish()?;
            let outcome = settler.wait_after_input(
                settle::DEFAULT_FIRST_DAMAGE,
                settle::DEFAULT_QUIET,
                settle::DEFAULT_CAP,
            )?;
            r.settle_total.push(now() - t);
            r.settle_arms = settler.round_trips() - arms;
            match outcome.first_damage {
                Some(first) => r.first_damage.push(first),
                None => r.no_damage += 1,
            }
        }
        drop(settler);
        drop(input);
        drop(cap);
        Ok::<_, anyhow::Error>(r)
    }
    .await;
    let stopped_b = browser.stop().await;
    let stopped_x = xserver.stop().await;
    let r = result?;
    stopped_b.context("stop chromium")?;
    stopped_x.context("stop the x server")?;
    Ok(r)
}

// ---------------------------------------------------------------------------------------------
// Cold start.

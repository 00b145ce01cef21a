//! The markdown `bench_desktop` prints: the machine it ran on, then the tables of each part and
//! the goals.

use super::*;

/// The first line of a command's stdout, or of its stderr when stdout is empty.
pub(super) fn command_line(program: &str, args: &[&str]) -> String {
    let Ok(out) = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
    else {
        return "unavailable".into();
    };
    let text = if out.stdout.is_empty() {
        out.stderr
    } else {
        out.stdout
    };
    String::from_utf8_lossy(&text)
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.contains("unexpected operator"))
        .unwrap_or("unavailable")
        .to_string()
}

/// `package version` lines from dpkg, for the tools this bench runs.
pub(super) fn package_versions(packages: &[&str]) -> String {
    let out = Command::new("dpkg-query")
        .args(["-W", "-f=${Package} ${Version}\\n"])
        .args(packages)
        .stdin(Stdio::null())
        .output();
    match out {
        Ok(o) if !o.stdout.is_empty() => String::from_utf8_lossy(&o.stdout)
            .lines()
            .collect::<Vec<_>>()
            .join(", "),
        _ => "unavailable".into(),
    }
}

pub(super) fn fs_type(path: &Path) -> Option<String> {
    let out = Command::new("df")
        .args(["--output=fstype"])
        .arg(path)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines().nth(1).map(|l| l.trim().to_string())
}

pub(super) fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

pub(super) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|t| t.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

pub(super) fn nproc() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// Report.

fn row_ms(name: &str, s: &Summary, extra: &str) {
    println!(
        "| {name} | {} | {:.2} | {:.2} | {extra} |",
        s.n,
        ms(s.p50),
        ms(s.p90)
    );
}

pub(super) fn print_local(r: &ObserveRuns) {
    let obs = summarize(&r.observe);
    let import = summarize(&r.import);
    let scrot = summarize(&r.scrot);
    println!(
        "#### Observe, guest side (display {}, 1280x800x24, Chromium on the local page; MIT-SHM: {}; screen still before the runs: {})\n",
        r.display, r.shm, r.still
    );
    println!("Interleaved: {} rounds of (observes, one `import`, one `scrot`). `scrot` writes to `{}`. Load average when these rounds began: {}.\n", r.import.len(), r.scrot_dir, r.load_observe);
    println!("| measure | runs | p50 ms | p90 ms | PNG KiB (median) | p50 / observe p50 |");
    println!("|---|---|---|---|---|---|");
    let png = |v: &[usize]| kib(median_usize(v));
    row_ms(
        "`Capturer::observe` of the still screen (capture, compared with the last frame: its PNG and id are reused; cursor; active window). A changed screen adds `encode_png` and `frame_id` (steps below)",
        &obs,
        &format!("{:.0} | 1.00", png(&r.observe_png)),
    );
    row_ms(
        "`import -window root png:-` (process, stdout piped)",
        &import,
        &format!(
            "{:.0} | **{:.1}×**",
            png(&r.import_png),
            ratio(import.p50, obs.p50)
        ),
    );
    row_ms(
        "`scrot -o -z <tmpfs>/shot.png` (process)",
        &scrot,
        &format!(
            "{:.0} | **{:.1}×**",
            png(&r.scrot_png),
            ratio(scrot.p50, obs.p50)
        ),
    );
    println!();
    println!(
        "Where observe's time goes (its steps timed one by one, in the same rounds, {} runs):\n",
        r.capture.len()
    );
    println!("| step | runs | p50 ms | p90 ms | share of observe p50 |");
    println!("|---|---|---|---|---|");
    for (name, v) in [
        ("`Capturer::capture` (SHM GetImage + BGRX→RGB)", &r.capture),
        ("`encode_png` (fdeflate fast, Sub filter)", &r.encode),
        ("`frame_id` (SHA-256 of the PNG)", &r.hash),
        ("`Capturer::cursor` (QueryPointer round trip)", &r.cursor),
        (
            "`Capturer::active_window` (property and title round trips)",
            &r.window,
        ),
    ] {
        let s = summarize(v);
        row_ms(name, &s, &format!("{:.0}%", 100.0 * ratio(s.p50, obs.p50)));
    }
    println!();

    let click = summarize(&r.click);
    let xdo = summarize(&r.xdotool);
    println!("#### One click through XTEST (interleaved rounds of clicks, one `xdotool`, one `true`; a blank spot of the page)\n");
    println!(
        "Each round: back-to-back clicks, each followed at once by one bare X round trip on the capturer's connection (the floor under any request that waits for the server); then as many isolated clicks and isolated round trips, each after a pause without input; then one `xdotool click 1` and one `true`. Load average when these rounds began: {}.\n",
        r.load_click
    );
    let iso = summarize(&r.click_isolated);
    let row = |name: &str, v: &[Duration]| {
        let x = summarize(v);
        println!(
            "| {name} | {} | {:.0} | {:.0} | {:.2}× |",
            x.n,
            us(x.p50),
            us(x.p90),
            ratio(x.p50, click.p50)
        );
    };
    println!("| measure | runs | p50 µs | p90 µs | p50 / back-to-back click p50 |");
    println!("|---|---|---|---|---|");
    row(
        "`Input::click` + `Input::finish` back to back (move + press + release + GetInputFocus round trip)",
        &r.click,
    );
    row(
        "(floor) one X round trip right after each back-to-back click: `Capturer::cursor` (QueryPointer)",
        &r.round_trip,
    );
    row(
        &format!(
            "`Input::click` + `Input::finish` isolated ({} ms without input before it)",
            ISOLATION.as_millis()
        ),
        &r.click_isolated,
    );
    row(
        "(floor) one X round trip, isolated the same way",
        &r.round_trip_isolated,
    );
    row(
        "`Input::click` + `Input::finish` isolated, on the same display before Chromium started (no client to react)",
        &r.click_empty,
    );
    println!(
        "| `xdotool click 1` (process) | {} | {:.0} | {:.0} | **{:.0}×** (isolated click: **{:.0}×**) |",
        xdo.n,
        us(xdo.p50),
        us(xdo.p90),
        ratio(xdo.p50, click.p50),
        ratio(xdo.p50, iso.p50)
    );
    let spawn = summarize(&r.spawn);
    println!(
        "| (floor) spawning `true` with the same environment | {} | {:.0} | {:.0} | {:.0}× |",
        spawn.n,
        us(spawn.p50),
        us(spawn.p90),
        ratio(spawn.p50, click.p50)
    );
    println!();

    let per_action = summarize(&r.batch_per_action);
    let once = summarize(&r.batch_once);
    println!("#### A batch of {BATCH} clicks (blank spot of the page; interleaved, each batch after {} ms without input)\n", ISOLATION.as_millis());
    println!("Load average when these rounds began: {}.\n", r.load_batch);
    println!("| batch | runs | p50 µs | p90 µs | p50 / one sync per action |");
    println!("|---|---|---|---|---|");
    println!(
        "| one sync per action (`Input::finish` after each click: every action before issue 17) | {} | {:.0} | {:.0} | 1.00× |",
        per_action.n,
        us(per_action.p50),
        us(per_action.p90)
    );
    println!(
        "| one sync per batch (`Input::finish` once; it made {} sync) | {} | {:.0} | {:.0} | **{:.2}×** |",
        r.batch_syncs,
        once.n,
        us(once.p50),
        us(once.p90),
        ratio(once.p50, per_action.p50)
    );
    println!();

    let total = summarize(&r.settle_total);
    let first = summarize(&r.first_damage);
    let quiet = settle::DEFAULT_QUIET;
    let late = r.first_damage.iter().filter(|d| **d > quiet).count();
    println!("#### Settling after a click on the counter bar (as `act`: `Settler::arm`, click, `Input::finish`, `Settler::wait_after_input`)\n");
    println!(
        "Each run after {} ms without input; the settler's round trips per run: {}. Load average when these rounds began: {}.\n",
        ISOLATION.as_millis(),
        r.settle_arms,
        r.load_settle
    );
    println!("| measure | runs | p50 ms | p90 ms | max ms |");
    println!("|---|---|---|---|---|");
    println!(
        "| arm + click + sync + settle | {} | {:.1} | {:.1} | {:.1} |",
        total.n,
        ms(total.p50),
        ms(total.p90),
        ms(total.max)
    );
    println!(
        "| from the start of the wait to Chromium's first damage | {} | {:.1} | {:.1} | {:.1} |",
        first.n,
        ms(first.p50),
        ms(first.p90),
        ms(first.max)
    );
    println!();
    println!(
        "First damage later than the {} ms quiet period (the old settle, whose quiet period began at once, returned before these draws): **{late} of {}**. No damage within the {} ms bound: {} of {}.\n",
        quiet.as_millis(),
        total.n,
        settle::DEFAULT_FIRST_DAMAGE.as_millis(),
        r.no_damage,
        total.n
    );
}

pub(super) fn print_starts(kinds: &[KindStarts; 2], api: &ApiRuns) {
    println!("#### Desktop cold start: `XServer::start` then `Browser::start` until CDP answers `/json/version`\n");
    println!("Each run starts both and stops both (CDP `Browser.close`, then the X server's SIGTERM) before the next; runs alternate between Xvnc (the desktops' server) and Xvfb (the server desktops had before: the anchor). Page cache warm (Chromium's files were read by earlier runs).\n");
    println!("| measure | runs | p50 ms | p90 ms | min ms | max ms |");
    println!("|---|---|---|---|---|---|");
    let row = |name: &str, v: &[Duration]| {
        let s = summarize(v);
        println!(
            "| {name} | {} | {:.0} | {:.0} | {:.0} | {:.0} |",
            s.n,
            ms(s.p50),
            ms(s.p90),
            ms(s.min),
            ms(s.max)
        );
    };
    for k in kinds {
        let x = k.kind.program();
        row(
            &format!("**fresh profile: {x} + Chrome until CDP answers**"),
            &k.fresh.total,
        );
        row(
            &format!("… of which `XServer::start` of {x} (until `-displayfd` answers)"),
            &k.fresh.xserver,
        );
        row("… of which `Browser::start`", &k.fresh.browser);
        row(
            "… … of which Chrome spawn → CDP answers (`Browser::startup_time`)",
            &k.fresh.chrome,
        );
        row(
            &format!("**warm profile: {x} + Chrome until CDP answers**"),
            &k.warm.total,
        );
        row(
            &format!("… of which `XServer::start` of {x}"),
            &k.warm.xserver,
        );
        row("… of which `Browser::start`", &k.warm.browser);
        row(
            &format!("stop (Browser.close + {x} stop), fresh runs"),
            &k.fresh.stop,
        );
    }
    row(
        "through the API: `screens/<bot>/ensure` of a new bot (Xvnc; fresh profile; + 4 X clients, lease check, tunnel), one at a time with earlier desktops live",
        &api.ensure_new,
    );
    row(
        "… of which Chrome spawn → CDP answers (guest log `startup_ms`)",
        &api.guest_chrome,
    );
    println!(
        "| through the API: first `ensure` on the computer | 1 | {:.0} | | | |",
        ms(api.ensure_first)
    );
    println!();
    println!("X server memory once Chrome answers CDP (fresh profile, Chrome on its new tab page; median over the fresh runs):\n");
    println!("| server | runs | VmRSS MiB | PSS MiB |");
    println!("|---|---|---|---|");
    for k in kinds {
        println!(
            "| {} | {} | {:.1} | {:.1} |",
            k.kind.program(),
            k.fresh.rss_kb.len(),
            median_usize(&k.fresh.rss_kb) as f64 / 1024.0,
            median_usize(&k.fresh.pss_kb) as f64 / 1024.0,
        );
    }
    println!();
}

pub(super) fn print_api(api: &ApiRuns, guest_observe_p50: Duration) {
    println!("#### Observe through the API (`POST /v1/computers/<id>/screens/<bot>/observe`, release binaries, QUIC tunnel on loopback)\n");
    println!("Time from sending the request to the parsed JSON response (base64 decoding of the image not included). Interleaved rounds: an act clicks the page's counter bar (timed apart, below), one observe of the changed frame, one observe of the same frame again; the two clients take turns by round.\n");
    println!("| path | client | runs | p50 ms | p90 ms | p50 / guest-side observe p50 |");
    println!("|---|---|---|---|---|---|");
    for (path, runs) in [
        (
            format!(
                "changed frame (PNG median {:.0} KiB, sent base64)",
                kib(median_usize(&api.changed_png))
            ),
            &api.changed,
        ),
        (
            "unchanged frame, right after the changed one (image omitted; the guest captures and compares, reusing the last PNG)"
                .to_string(),
            &api.unchanged,
        ),
    ] {
        for via in [Via::Shipped, Via::NoDelay] {
            let s = summarize(&runs[via_index(via)]);
            println!(
                "| {path} | {} | {} | {:.2} | {:.2} | {:.1}× |",
                via.name(),
                s.n,
                ms(s.p50),
                ms(s.p90),
                ratio(s.p50, guest_observe_p50)
            );
        }
    }
    println!();
    if api.changed_but_unchanged + api.unchanged_but_changed > 0 {
        println!(
            "Excluded: {} \"changed\" observations that came back unchanged, {} \"unchanged\" ones that came back with an image.\n",
            api.changed_but_unchanged, api.unchanged_but_changed
        );
    }

    println!("#### Acts through the API (`POST .../act`, shipped client, default settle: the first damage after the input within {} ms, then {} ms without damage, at most {} ms)\n",
        settle::DEFAULT_FIRST_DAMAGE.as_millis(), settle::DEFAULT_QUIET.as_millis(), settle::DEFAULT_CAP.as_millis());
    println!("| act | runs | p50 ms | p90 ms | returned before Chromium drew (the observe after it came back unchanged) |");
    println!("|---|---|---|---|---|");
    let act = summarize(&api.act);
    println!(
        "| one click on the counter bar (before each changed observe above) | {} | {:.1} | {:.1} | {} of {} |",
        act.n,
        ms(act.p50),
        ms(act.p90),
        api.changed_but_unchanged,
        act.n
    );
    let batch = summarize(&api.act_batch);
    println!(
        "| a batch of {BATCH}: {} moves over a blank spot, then a click on the counter bar | {} | {:.1} | {:.1} | {} of {} |",
        BATCH - 1,
        batch.n,
        ms(batch.p50),
        ms(batch.p90),
        api.batch_before_draw,
        batch.n
    );
    let blank = summarize(&api.act_blank);
    let mut settled = api.act_blank_settled.clone();
    settled.sort_unstable();
    println!(
        "| one click on a blank spot (nothing draws: the settle waits out its bound; `settledMs` median {}) | {} | {:.1} | {:.1} | (nothing to draw) |",
        settled.get(settled.len().saturating_sub(1) / 2).copied().unwrap_or_default(),
        blank.n,
        ms(blank.p50),
        ms(blank.p90),
    );
    println!();
}

fn mib(kb: u64) -> f64 {
    kb as f64 / 1024.0
}

pub(super) fn print_memory(api: &ApiRuns) {
    println!("#### Memory with live desktops (through the API; each desktop's bot opened the page and observed it)\n");
    println!("| live desktops | guest VmRSS MiB | guest anon / file / shmem MiB | guest PSS MiB | Xvnc: n, RSS sum, PSS sum MiB | Chromium: n, RSS sum, PSS sum MiB | other children | Xvnc + Chromium PSS per desktop MiB |");
    println!("|---|---|---|---|---|---|---|---|");
    for m in &api.mem {
        let per = if m.desktops == 0 {
            "".to_string()
        } else {
            format!(
                "{:.0}",
                mib(m.xserver.pss_kb + m.chromium.pss_kb) / m.desktops as f64
            )
        };
        println!(
            "| {} | {:.1} | {:.1} / {:.1} / {:.1} | {:.1} | {}, {:.0}, {:.0} | {}, {:.0}, {:.0} | {} | {per} |",
            m.desktops,
            mib(m.guest_rss_kb),
            mib(m.guest_anon_kb),
            mib(m.guest_file_kb),
            mib(m.guest_shmem_kb),
            mib(m.guest_pss_kb),
            m.xserver.count,
            mib(m.xserver.rss_kb),
            mib(m.xserver.pss_kb),
            m.chromium.count,
            mib(m.chromium.rss_kb),
            mib(m.chromium.pss_kb),
            m.other.count,
        );
    }
    println!();
    println!(
        "RSS sums count pages shared between Chromium processes once per process; PSS splits them. Computer stop through the API (guest SIGTERM, every Chrome closed through CDP) took {:.0} ms; desktop processes still alive afterwards (killed): {}; X locks or sockets left: {}.\n",
        ms(api.stop),
        api.leftovers,
        if api.locks_left.is_empty() {
            "none".to_string()
        } else {
            api.locks_left.join(", ")
        }
    );
}

pub(super) fn print_goals(local: &ObserveRuns, kinds: &[KindStarts; 2]) {
    let obs = summarize(&local.observe);
    let import = summarize(&local.import);
    let click = summarize(&local.click);
    let iso = summarize(&local.click_isolated);
    let [xvnc, xvfb] = kinds;
    let start = summarize(&xvnc.fresh.total);
    let anchor_start = summarize(&xvfb.fresh.total);
    let (rss, anchor_rss) = (
        median_usize(&xvnc.fresh.rss_kb),
        median_usize(&xvfb.fresh.rss_kb),
    );
    let yes = |b: bool| if b { "met" } else { "**missed**" };
    println!("#### Goals (issue 3)\n");
    println!("| goal | measured | verdict |");
    println!("|---|---|---|");
    println!(
        "| observe p50 ≤ 10 ms, guest side | {:.2} ms | {} |",
        ms(obs.p50),
        yes(obs.p50 <= Duration::from_millis(10))
    );
    let x = ratio(import.p50, obs.p50);
    println!(
        "| observe ≥ 20× faster than `import` (p50) | {x:.1}× | {} |",
        yes(x >= 20.0)
    );
    println!(
        "| click ≤ 1 ms (p50), isolated | {:.0} µs | {} |",
        us(iso.p50),
        yes(iso.p50 <= Duration::from_millis(1))
    );
    println!(
        "| click ≤ 1 ms (p50), back to back | {:.0} µs | {} |",
        us(click.p50),
        yes(click.p50 <= Duration::from_millis(1))
    );
    println!(
        "| cold start ≤ 1.5 s (p50, fresh profile, Xvnc) | {:.0} ms | {} |",
        ms(start.p50),
        yes(start.p50 <= Duration::from_millis(1500))
    );
    println!(
        "| cold start on Xvnc no worse than on Xvfb (p50, fresh profile; issue 17) | {:.0} ms vs {:.0} ms ({:.2}×) | {} |",
        ms(start.p50),
        ms(anchor_start.p50),
        ratio(start.p50, anchor_start.p50),
        yes(start.p50 <= anchor_start.p50)
    );
    println!(
        "| X server RSS per desktop no worse than Xvfb's (median, Chrome up; issue 17) | {:.1} MiB vs {:.1} MiB | {} |",
        rss as f64 / 1024.0,
        anchor_rss as f64 / 1024.0,
        yes(rss <= anchor_rss)
    );
    println!();
}

//! `bench_grounding`: grounded observations (issue 34, "Must show" 3), in one run, on the
//! guest's own desktop code ([`Screens`]: Xvnc, Debian Chromium, the page browser) in process.
//!
//! 1. **Marks latency.** On a page of 500 buttons, all in the viewport, computer_observe with
//!    marks (capture, the page's marks read, capture again, 500 marks drawn, PNG encoded) against
//!    a plain computer_observe of the same screen (capture, PNG encoded; both ask for the whole
//!    frame so neither is skipped as unchanged): `--runs` timed calls each after `--warmup`,
//!    p50 and p90.
//! 2. **Bytes to the model.** A scripted 20-step task over three pages (a to-do list, a form,
//!    the 500-button page): each step is one computer_act with an observation after it, run
//!    once sending whole frames (the default: whole or unchanged) and once sending changed
//!    regions; the image bytes each way are summed and the task's outcome (the pages' final
//!    state, read with browser_snapshot) must be the same.
//!
//! Timings are printed, never asserted. Usage: `target/release/bench_grounding [--runs N]
//! [--warmup N]`; `--smoke` for CI.

use anyhow::{ensure, Context, Result};
use gateway_proto::desktop::{Action, FrameKind, ObserveOptions, SendMode};
use gateway_proto::BotId;
use guest_agent::screens::{Screens, ScreensConfig};
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;
use tests::bench::{args as bench_args, loadavg, now, size};
use tests::fixture::Fixture;

/// 500 buttons in a 25x20 grid that fits the viewport; a click on one marks it.
fn buttons() -> String {
    let mut page = String::from(
        "<!doctype html><meta charset=\"utf-8\"><title>Buttons</title><style>body{margin:4px}\
         #g{display:grid;grid-template-columns:repeat(25,48px);gap:2px}\
         button{width:48px;height:30px;padding:0;font:11px sans-serif}\
         .on{background:#8c8}</style><div id=\"g\">",
    );
    for i in 1..=500 {
        page.push_str(&format!("<button onclick=\"on(this)\">b{i}</button>"));
    }
    // The title lists the buttons that are on: the task's outcome on this page.
    page.push_str(
        "</div><script>function on(b){b.classList.toggle('on');document.title=\
         Array.from(document.querySelectorAll('.on'),(x)=>x.textContent).join(' ')}</script>",
    );
    page
}

const TODO: &str = r#"<!doctype html><meta charset="utf-8"><title>To do</title>
<style>body{font:15px sans-serif;margin:24px} li{margin:4px 0}</style>
<h1>To do</h1><p>Write what needs doing and press Enter.</p>
<input id="new" aria-label="New item" placeholder="New item" style="width:300px">
<button id="add">Add</button> <span id="count">0 items</span><ul id="list"></ul>
<script>
const list = document.getElementById('list');
function add() {
  const input = document.getElementById('new');
  if (!input.value) return;
  const li = document.createElement('li');
  const box = document.createElement('input');
  box.type = 'checkbox';
  box.setAttribute('aria-label', 'done ' + input.value);
  li.append(box, ' ' + input.value);
  list.append(li);
  input.value = '';
  document.getElementById('count').textContent = list.children.length + ' items';
}
document.getElementById('add').onclick = add;
document.getElementById('new').addEventListener('keydown', (e) => { if (e.key === 'Enter') add(); });
</script>"#;

const FORM: &str = r#"<!doctype html><meta charset="utf-8"><title>Settings</title>
<style>body{font:15px sans-serif;margin:24px} label{display:block;margin:10px 0}</style>
<h1>Settings</h1>
<label>Name <input id="name" aria-label="Name"></label>
<label>Email <input id="email" aria-label="Email"></label>
<label><input type="checkbox" id="news" aria-label="Newsletter"> Newsletter</label>
<button id="save" onclick="document.getElementById('saved').textContent = 'Saved ' + document.getElementById('name').value">Save</button>
<p id="saved"></p>"#;

struct Options {
    runs: usize,
    warmup: usize,
}

fn options() -> Result<Options> {
    let mut o = Options {
        runs: size(50, 3),
        warmup: size(5, 1),
    };
    let mut args = bench_args();
    while let Some(a) = args.next() {
        let mut value = || args.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--runs" => o.runs = value()?.parse()?,
            "--warmup" => o.warmup = value()?.parse()?,
            other => anyhow::bail!("unknown argument {other}"),
        }
    }
    ensure!(o.runs > 0, "runs must be positive");
    Ok(o)
}

fn p(times: &mut [Duration], q: f64) -> f64 {
    times.sort();
    let at = ((q * times.len() as f64).ceil() as usize).max(1) - 1;
    times[at].as_secs_f64() * 1000.0
}

fn ref_of(s: &gateway_proto::page::Snapshot, name: &str) -> Result<String> {
    s.elements
        .iter()
        .find(|e| e.name == name)
        .map(|e| e.element.clone())
        .with_context(|| format!("no element {name:?} in {}", s.tree))
}

/// A snapshot's tree without its refs (each run mints new ones).
fn without_refs(tree: &str) -> String {
    let mut out = String::with_capacity(tree.len());
    let mut rest = tree;
    while let Some(i) = rest.find(" [e") {
        out.push_str(&rest[..i]);
        let tail = &rest[i + 3..];
        let digits = tail.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 && tail.as_bytes().get(digits) == Some(&b']') {
            rest = &tail[digits + 1..];
        } else {
            out.push_str(" [e");
            rest = tail;
        }
    }
    out.push_str(rest);
    out
}

fn click(element: String) -> Action {
    Action::ClickRef {
        element,
        button: gateway_proto::desktop::MouseButton::Left,
        double: false,
    }
}

fn text(t: &str) -> Action {
    Action::Type { text: t.into() }
}

fn enter() -> Action {
    Action::Key {
        key: "enter".into(),
        modifiers: Vec::new(),
    }
}

/// One run of the scripted task, observing after each step as `send` says: the image bytes
/// sent, how many observations were whole, regions, unchanged, and the final state of the
/// pages (their snapshots' trees).
async fn task(
    screens: &Screens,
    bot: &BotId,
    urls: &[String; 3],
    send: SendMode,
) -> Result<TaskRun> {
    let observe = ObserveOptions {
        send,
        ..ObserveOptions::default()
    };
    let mut bytes = 0u64;
    let mut kinds = [0usize; 3];
    // The first observation on each page (steps 1, 14 and 18): a new page costs its whole
    // frame either way.
    let arrivals = [0, 13, 17];
    let mut steps = 0;
    let mut arrival_bytes = 0u64;
    let mut outcome = String::new();
    let mut step = |taken: Option<(gateway_proto::desktop::ObservationMeta, Vec<u8>)>| {
        if let Some((meta, png)) = taken {
            if arrivals.contains(&steps) {
                arrival_bytes += png.len() as u64;
            }
            steps += 1;
            bytes += png.len() as u64;
            kinds[match meta.kind {
                FrameKind::Full => 0,
                FrameKind::Regions => 1,
                FrameKind::Unchanged => 2,
            }] += 1;
        }
    };
    // Step 1: the to-do page (a fresh document each run), observed whole: the model starts
    // with no frame.
    screens.page_navigate(bot, &urls[0]).await?;
    let whole = ObserveOptions {
        send: SendMode::Full,
        ..ObserveOptions::default()
    };
    let (_, first) = screens
        .act(
            bot,
            &[Action::Wait { ms: 0 }],
            Some(whole),
            Some(200),
            None,
            || 0,
        )
        .await?;
    step(first);
    let s = screens.page_snapshot(bot).await?;
    let new = ref_of(&s, "New item")?;
    let items = ["milk", "bread", "eggs", "coffee", "apples"];
    let run = |actions: Vec<Action>| async move {
        screens
            .act(bot, &actions, Some(observe), None, None, || 0)
            .await
    };
    // Steps 2-11: five items, each typed (one step) and added with Enter (one step).
    for item in items {
        let (_, o) = run(vec![click(new.clone()), text(item)]).await?;
        step(o);
        let (_, o) = run(vec![enter()]).await?;
        step(o);
    }
    // Steps 12-13: two items ticked.
    let s = screens.page_snapshot(bot).await?;
    for name in ["done milk", "done eggs"] {
        let (_, o) = run(vec![click(ref_of(&s, name)?)]).await?;
        step(o);
    }
    outcome.push_str(&without_refs(&screens.page_snapshot(bot).await?.tree));
    // Steps 14-17: the settings form.
    screens.page_navigate(bot, &urls[1]).await?;
    let s = screens.page_snapshot(bot).await?;
    let (_, o) = run(vec![click(ref_of(&s, "Name")?), text("Ada")]).await?;
    step(o);
    let (_, o) = run(vec![click(ref_of(&s, "Email")?), text("ada@example.test")]).await?;
    step(o);
    let (_, o) = run(vec![click(ref_of(&s, "Newsletter")?)]).await?;
    step(o);
    let (_, o) = run(vec![click(ref_of(&s, "Save")?)]).await?;
    step(o);
    outcome.push_str(&without_refs(&screens.page_snapshot(bot).await?.tree));
    // Steps 18-20: the button grid, three buttons toggled.
    screens.page_navigate(bot, &urls[2]).await?;
    let s = screens.page_snapshot(bot).await?;
    for name in ["b1", "b7", "b30"] {
        let (_, o) = run(vec![click(ref_of(&s, name)?)]).await?;
        step(o);
    }
    // The button grid's state: which buttons are on, in its title.
    let on = screens.page_snapshot(bot).await?.title;
    ensure!(on == "b1 b7 b30", "buttons on: {on:?}");
    ensure!(
        outcome.contains("5 items") && outcome.contains("Saved Ada"),
        "the task did not finish: {outcome}"
    );
    outcome.push_str(&on);

    ensure!(steps == 20, "the task observed {steps} times");
    Ok(TaskRun {
        bytes,
        arrival_bytes,
        kinds,
        outcome,
    })
}

/// What one run of the task sent.
struct TaskRun {
    /// Image bytes of all 20 observations.
    bytes: u64,
    /// Of those, the first observation on each page.
    arrival_bytes: u64,
    /// Whole, regions, unchanged.
    kinds: [usize; 3],
    /// The pages' final state.
    outcome: String,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    tests::bench::Usage::new("grounded observations on the guest's own desktop code")
        .flag("--runs", "N", "measured observations (default 50; smoke 3)")
        .flag(
            "--warmup",
            "N",
            "observations before measuring (default 5; smoke 1)",
        )
        .check();
    let o = options()?;
    let load_before = loadavg();
    let fx = Fixture::start().await?;
    let urls = [
        fx.page("todo", TODO),
        fx.page("form", FORM),
        fx.page("buttons", &buttons()),
    ];
    let home = tempfile::tempdir()?;
    let runtime = tempfile::tempdir()?;
    std::fs::set_permissions(runtime.path(), std::fs::Permissions::from_mode(0o700))?;
    let screens = Screens::new(
        ScreensConfig {
            home: home.path().to_path_buf(),
            runtime_dir: runtime.path().to_path_buf(),
            limit: None,
            chromium: "/usr/bin/chromium".into(),
            device_scale: None,
        },
        guest_agent::clock::monotonic(),
    );
    let bot = BotId::new("bench-grounding")?;
    let result = run(&screens, &bot, &urls, &o).await;
    screens.shutdown().await;
    let (plain, marked, marks, full, regions) = result?;
    println!("Load average before: {load_before}; after: {}\n", loadavg());
    println!("| observe (1280x800, 500 elements in view) | p50 ms | p90 ms |");
    println!("|---|---:|---:|");
    println!("| plain (anchor) | {:.1} | {:.1} |", plain.0, plain.1);
    println!(
        "| with marks ({marks} marks) | {:.1} | {:.1} |",
        marked.0, marked.1
    );
    println!(
        "\nmarks / plain at p50: {:.2}x (+{:.1} ms)\n",
        marked.0 / plain.0,
        marked.0 - plain.0
    );
    println!(
        "| 20-step task | image bytes | of which 3 page arrivals | other 17 steps | whole / regions / unchanged |"
    );
    println!("|---|---:|---:|---:|---|");
    for (name, r) in [
        ("whole frames (anchor)", &full),
        ("changed regions", &regions),
    ] {
        println!(
            "| {name} | {} | {} | {} | {} / {} / {} |",
            r.bytes,
            r.arrival_bytes,
            r.bytes - r.arrival_bytes,
            r.kinds[0],
            r.kinds[1],
            r.kinds[2]
        );
    }
    let ratio = |a: u64, b: u64| a as f64 / b.max(1) as f64;
    println!(
        "\nwhole / regions: {:.1}x fewer bytes over the task, {:.1}x on the 17 steps within a \
         page; same outcome: yes",
        ratio(full.bytes, regions.bytes),
        ratio(
            full.bytes - full.arrival_bytes,
            regions.bytes - regions.arrival_bytes
        )
    );
    Ok(())
}

type Timing = (f64, f64);

async fn run(
    screens: &Screens,
    bot: &BotId,
    urls: &[String; 3],
    o: &Options,
) -> Result<(Timing, Timing, usize, TaskRun, TaskRun)> {
    screens.ensure(bot).await?;
    screens.page_navigate(bot, &urls[2]).await?;
    let full = ObserveOptions {
        send: SendMode::Full,
        ..ObserveOptions::default()
    };
    let marked = ObserveOptions {
        marks: true,
        ..full
    };
    let mut plain_times = Vec::new();
    let mut mark_times = Vec::new();
    let mut marks = 0;
    for i in 0..o.warmup + o.runs {
        let t = now();
        screens.observe(bot, full, 0).await?;
        let plain = t.elapsed();
        let t = now();
        let (meta, _) = screens.observe(bot, marked, 0).await?;
        let with_marks = t.elapsed();
        let m = meta.marks.context("no marks")?;
        ensure!(m.note.is_none(), "marks note: {:?}", m.note);
        marks = m.items.len();
        if i >= o.warmup {
            plain_times.push(plain);
            mark_times.push(with_marks);
        }
    }
    ensure!(marks >= 500, "only {marks} marks");
    let plain = (p(&mut plain_times, 0.5), p(&mut plain_times, 0.9));
    let marked = (p(&mut mark_times, 0.5), p(&mut mark_times, 0.9));
    let full = task(screens, bot, urls, SendMode::Auto).await?;
    let regions = task(screens, bot, urls, SendMode::Changes).await?;
    ensure!(
        full.outcome == regions.outcome,
        "the task ended differently:\n{}\n---\n{}",
        full.outcome,
        regions.outcome
    );
    Ok((plain, marked, marks, full, regions))
}

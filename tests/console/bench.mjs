// The console's benchmark (issue 31, "Must show" 4), driven by tests/src/bin/bench_console.rs,
// which starts a real `rakazo serve` with one local computer (a bot desktop) and a fleet of fake
// computers, and passes everything in the environment:
//
//   RAKAZO_BENCH_URL        the server
//   RAKAZO_BENCH_TOKEN      an admin token
//   RAKAZO_BENCH_COMPUTER   the local computer, RAKAZO_BENCH_BOT its bot with a desktop
//   RAKAZO_BENCH_FLEET      how many computers the list holds
//   RAKAZO_BENCH_RUNS       runs of each timed part
//
// Each part is measured against its anchor in the same run, and printed as one JSON line per
// measure: {"name", "runs": [...ms]} or {"name", "value"}. Nothing is asserted.
import { chromium } from "playwright-core";
import zlib from "node:zlib";

const env = (n) => {
  const v = process.env[n];
  if (!v) throw new Error(`${n} is not set`);
  return v;
};
const BASE = env("RAKAZO_BENCH_URL").replace(/\/+$/, "");
const TOKEN = env("RAKAZO_BENCH_TOKEN");
const COMPUTER = env("RAKAZO_BENCH_COMPUTER");
const BOT = env("RAKAZO_BENCH_BOT");
const FLEET = Number(env("RAKAZO_BENCH_FLEET"));
const RUNS = Number(env("RAKAZO_BENCH_RUNS"));
const LONG = 60000;

const out = (o) => console.log(JSON.stringify(o));

async function until(what, fn, timeout = LONG, every = 5) {
  const deadline = Date.now() + timeout;
  for (;;) {
    const v = await fn().catch(() => null);
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, every));
  }
}

/** Distinct colours sampled on a frame's canvas: a desktop picture has many, a blank one 1. */
const canvasColours = (frame) =>
  frame.evaluate(() => {
    const c = document.querySelector("canvas");
    if (!c || !c.width || !c.height) return 0;
    const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    const seen = new Set();
    const sx = Math.max(1, Math.floor(c.width / 80));
    const sy = Math.max(1, Math.floor(c.height / 50));
    for (let y = 0; y < c.height; y += sy)
      for (let x = 0; x < c.width; x += sx) {
        const i = (y * c.width + x) * 4;
        seen.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
      }
    return seen.size;
  });

async function api(method, path, body) {
  const r = await fetch(BASE + path, {
    method,
    headers: { Authorization: "Bearer " + TOKEN, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${await r.text()}`);
  return r;
}

/** The gzip size of what `page` loaded whose path passes `keep`, as a server compressing would send it. */
async function gzipOf(urls, keep) {
  let total = 0;
  for (const u of urls) {
    const p = new URL(u).pathname;
    if (!keep(p)) continue;
    const b = Buffer.from(await (await fetch(u)).arrayBuffer());
    total += zlib.gzipSync(b, { level: 9 }).length;
  }
  return total;
}

async function main() {
  const browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
  const ctx = await browser.newContext({ viewport: { width: 1400, height: 900 } });
  const page = await ctx.newPage();

  // 1. The first page's JS and CSS, against the bare viewer page's (noVNC), the anchor.
  const loaded = [];
  page.on("response", (r) => loaded.push(r.url()));
  await page.goto(BASE + "/console");
  await page.getByLabel("API token").waitFor();
  const isCode = (p) => p.endsWith(".js") || p.endsWith(".css");
  out({ name: "console_first_page_js_css_gzip_bytes", value: await gzipOf(loaded.splice(0), isCode) });
  const view = await (await api("POST", `/v1/computers/${COMPUTER}/screens/${BOT}/url`, { policy: "view" })).json();
  const bare = await ctx.newPage();
  bare.on("response", (r) => loaded.push(r.url()));
  await bare.goto(BASE + view.path);
  await until("the bare viewer's first frame", async () => (await canvasColours(bare.mainFrame())) >= 3);
  out({ name: "bare_viewer_js_css_gzip_bytes", value: await gzipOf(loaded.splice(0), isCode) });
  await bare.close();

  await page.getByLabel("API token").fill(TOKEN);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("button", { name: "Sign out" }).waitFor({ timeout: LONG });

  // 2. The list of the fleet: from the list's answer arriving (its resource timing) to every row
  //    drawn, against the anchor, the answer's own fetch time; and the whole navigation.
  await page.addInitScript((fleet) => {
    const look = () => {
      if (!window.__rowsAt && document.querySelectorAll("tbody tr").length >= fleet) window.__rowsAt = performance.now();
    };
    new MutationObserver(look).observe(document, { subtree: true, childList: true });
  }, FLEET);
  const drawn = [];
  const fetched = [];
  const whole = [];
  for (let i = 0; i < RUNS; i++) {
    await page.goto("about:blank");
    const t0 = Date.now();
    await page.goto(BASE + "/console#/");
    const at = await until("every computer's row", () => page.evaluate(() => window.__rowsAt), LONG, 2);
    whole.push(Date.now() - t0);
    const entry = await page.evaluate(() => {
      const e = performance
        .getEntriesByType("resource")
        .filter((r) => new URL(r.name).pathname === "/v1/computers")
        .sort((a, b) => a.responseEnd - b.responseEnd)[0];
      return e ? { start: e.startTime, end: e.responseEnd } : null;
    });
    if (!entry) throw new Error("no resource timing of GET /v1/computers");
    drawn.push(at - entry.end);
    fetched.push(entry.end - entry.start);
  }
  out({ name: "list_rows_drawn_ms", runs: drawn, rows: FLEET });
  out({ name: "list_data_fetched_ms", runs: fetched, rows: FLEET });
  out({ name: "list_navigation_ms", runs: whole, rows: FLEET });

  // 3. Click to the first frame of the bot's screen, against opening its view URL directly.
  const open = [];
  const direct = [];
  for (let i = 0; i < RUNS; i++) {
    await page.goto(BASE + "/console#/");
    const link = page.getByRole("link", { name: COMPUTER, exact: true });
    await link.waitFor({ timeout: LONG });
    let t0 = Date.now();
    await link.click();
    const handle = await page.locator(`iframe.screen-frame[data-bot="${BOT}"]`).elementHandle({ timeout: LONG });
    const frame = await until("the screen's document", () => handle.contentFrame());
    await until("the first frame in the console", async () => (await canvasColours(frame)) >= 3, LONG, 5);
    open.push(Date.now() - t0);

    const url = await (await api("POST", `/v1/computers/${COMPUTER}/screens/${BOT}/url`, { policy: "view" })).json();
    const p = await ctx.newPage();
    t0 = Date.now();
    await p.goto(BASE + url.path);
    await until("the first frame of the bare viewer", async () => (await canvasColours(p.mainFrame())) >= 3, LONG, 5);
    direct.push(Date.now() - t0);
    await p.close();
  }
  out({ name: "console_click_to_first_frame_ms", runs: open });
  out({ name: "bare_viewer_to_first_frame_ms", runs: direct });

  // 4. A command to its row in the console's Activity, against the activity stream read
  //    directly (server-sent events over one fetch).
  await page.goto(BASE + "/console#/");
  await page.getByRole("link", { name: COMPUTER, exact: true }).click();
  await page.getByRole("tab", { name: "Activity" }).click();
  const rowMs = [];
  const streamMs = [];
  const ctl = new AbortController();
  const stream = await fetch(`${BASE}/v1/computers/${COMPUTER}/activity/stream`, {
    headers: { Authorization: "Bearer " + TOKEN, Accept: "text/event-stream" },
    signal: ctl.signal,
  });
  const reader = stream.body.getReader();
  let buffered = "";
  const arrivals = new Map();
  (async () => {
    const dec = new TextDecoder();
    for (;;) {
      const { value, done } = await reader.read().catch(() => ({ done: true }));
      if (done) return;
      buffered += dec.decode(value, { stream: true });
      for (const m of buffered.matchAll(/bench-mark-(\d+)/g)) if (!arrivals.has(m[1])) arrivals.set(m[1], Date.now());
      buffered = buffered.slice(-256);
    }
  })();
  for (let i = 0; i < RUNS; i++) {
    const mark = `${Date.now()}${i}`;
    await page.evaluate((m) => {
      window.__row = 0;
      const look = () => {
        for (const li of document.querySelectorAll(".events li"))
          if (li.textContent.includes(m) && !window.__row) window.__row = Date.now();
      };
      window.__obs && window.__obs.disconnect();
      window.__obs = new MutationObserver(look);
      window.__obs.observe(document.body, { subtree: true, childList: true, characterData: true });
    }, "bench-mark-" + mark);
    const t0 = Date.now();
    await api("POST", `/v1/computers/${COMPUTER}/exec`, { argv: ["echo", "bench-mark-" + mark] });
    const row = await until("the activity row", () => page.evaluate(() => window.__row), 20000, 2);
    const arrived = await until("the stream's event", async () => arrivals.get(mark), 20000, 2);
    rowMs.push(row - t0);
    streamMs.push(arrived - t0);
  }
  ctl.abort();
  out({ name: "command_to_activity_row_ms", runs: rowMs });
  out({ name: "command_to_stream_event_ms", runs: streamMs });
  await browser.close();
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : e);
  process.exit(1);
});

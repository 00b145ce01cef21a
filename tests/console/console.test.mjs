// The console in real Chromium (issue 31), against a real `rakazo serve` with a local computer.
// tests/system/console.rs starts the server, the computer and the tokens, then runs this script
// with everything in the environment (never in argv):
//
//   RAKAZO_CONSOLE_URL              the server, http://127.0.0.1:PORT
//   RAKAZO_CONSOLE_COMPUTER         a running computer of workspace A with a bot desktop
//   RAKAZO_CONSOLE_BOT              that bot
//   RAKAZO_CONSOLE_OPERATOR_TOKEN   an operator of workspace A
//   RAKAZO_CONSOLE_VIEWER_TOKEN     a viewer of workspace A
//   RAKAZO_CONSOLE_OTHER_TOKEN      a viewer of workspace B
//   RAKAZO_CONSOLE_REVOKED_TOKEN    a viewer of workspace A whose id is RAKAZO_CONSOLE_REVOKED_ID,
//                                   revoked here with the real CLI (RAKAZO_BIN, RAKAZO_CONSOLE_ADMIN_TOKEN)
//   RAKAZO_CONSOLE_UPLOAD_LIMIT     the server's --attachment-max-bytes (small, to meet a 413)
//   RAKAZO_CONSOLE_SCREENSHOTS      where to write a screenshot of every view
//   RAKAZO_CONSOLE_SECRETS_OUT      a file this script writes the session cookies and capability
//                                   tokens it saw to (one a line), for the caller to check the
//                                   server log against
//
// It exits 0 only when every step passed, printing `N passed, 0 failed`, and prints the
// measurements as `console-bench: name=value` lines (printed, never asserted).
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import zlib from "node:zlib";
import { LONG, axe, check, env, finish, launch, noViolations, raw, run, shot, signIn, step, until, watch } from "./harness.mjs";

const BASE = env("RAKAZO_CONSOLE_URL").replace(/\/+$/, "");
const COMPUTER = env("RAKAZO_CONSOLE_COMPUTER");
const BOT = env("RAKAZO_CONSOLE_BOT");
const OPERATOR = env("RAKAZO_CONSOLE_OPERATOR_TOKEN");
const VIEWER = env("RAKAZO_CONSOLE_VIEWER_TOKEN");
const OTHER = env("RAKAZO_CONSOLE_OTHER_TOKEN");
const REVOKED = env("RAKAZO_CONSOLE_REVOKED_TOKEN");
const REVOKED_ID = env("RAKAZO_CONSOLE_REVOKED_ID");
const ADMIN = env("RAKAZO_CONSOLE_ADMIN_TOKEN");
const RAKAZO_BIN = env("RAKAZO_BIN");
const SHOTS = env("RAKAZO_CONSOLE_SCREENSHOTS");
const UPLOAD_LIMIT = Number(env("RAKAZO_CONSOLE_UPLOAD_LIMIT"));
const SECRETS_OUT = process.env.RAKAZO_CONSOLE_SECRETS_OUT || null;
run.base = BASE;
run.shots = SHOTS;

const cookiesSeen = new Set();
const bench = {};
const evil = [];

/** Records the sealed token of every capability URL a context's pages open (for the log check). */
function track(ctx) {
  ctx.on("request", (r) => {
    const m = /\/cap\/([^/?#]+)/.exec(new URL(r.url()).pathname);
    if (m) cookiesSeen.add(m[1]);
  });
  return ctx;
}

/** A session opened over raw HTTP: its cookie value and CSRF token. */
async function rawSession(token) {
  const r = await raw("POST", "/console/session", { body: { token } });
  check(r.status === 200, `POST /console/session answered ${r.status}`);
  const set = r.headers.get("set-cookie") || "";
  const m = /rakazo_session=([^;]+)/.exec(set);
  check(m, "a rakazo_session cookie is set");
  cookiesSeen.add(m[1]);
  return { cookie: m[1], csrf: (await r.json()).csrf, setCookie: set };
}

const computerPath = (...rest) => "/v1/computers/" + [COMPUTER, ...rest].map(encodeURIComponent).join("/");

async function state(token) {
  const r = await raw("GET", computerPath(), { token });
  check(r.ok, `GET computer answered ${r.status}`);
  return (await r.json()).state;
}

/** Acquires the bot's execution lease as a run would (through the API, not the page). */
async function acquire(owner) {
  const r = await raw("POST", computerPath("leases", BOT, "acquire"), { token: OPERATOR, body: { owner } });
  check(r.ok, `lease acquire answered ${r.status}`);
  return (await r.json()).lease;
}

async function releaseLease(lease) {
  const r = await raw("POST", computerPath("leases", BOT, "release"), { token: OPERATOR, body: { lease, outcome: "success" } });
  check(r.ok, `lease release answered ${r.status}`);
}

/** Runs a command as the bot does, under its lease (it starts in bots/<bot>/). */
async function exec(argv) {
  const lease = await acquire("run-console");
  try {
    const r = await raw("POST", computerPath("exec"), { token: OPERATOR, body: { argv, bot: BOT, lease } });
    check(r.ok, `exec answered ${r.status}`);
    const text = await r.text();
    const last = text.trim().split("\n").map((l) => JSON.parse(l)).pop();
    check(last.type === "exit" && last.code === 0, "the command exited 0: " + text);
  } finally {
    await releaseLease(lease);
  }
}

/** Whether a canvas in the viewer frame shows a picture: its sampled pixels are not all one colour. */
async function canvasColours(frame) {
  return frame.evaluate(() => {
    const c = document.querySelector("canvas");
    if (!c || !c.width || !c.height) return 0;
    const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    const seen = new Set();
    const stepX = Math.max(1, Math.floor(c.width / 80));
    const stepY = Math.max(1, Math.floor(c.height / 50));
    for (let y = 0; y < c.height; y += stepY)
      for (let x = 0; x < c.width; x += stepX) {
        const i = (y * c.width + x) * 4;
        seen.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
      }
    return seen.size;
  });
}

async function frameOf(locator) {
  const handle = await locator.elementHandle({ timeout: LONG });
  return until("the iframe's document", () => handle.contentFrame());
}

const statusOf = (frame) => frame.evaluate(() => document.documentElement.getAttribute("data-rakazo-status") || "");

/** The text of the xterm rows in the shell frame. */
const rows = (frame) => frame.evaluate(() => (document.querySelector(".xterm-rows") || {}).innerText || "");

/** Types `line` + Enter into the shell and answers the first output line matching `re`. */
async function shellRun(page, frame, line, re) {
  await frame.locator(".xterm-helper-textarea").focus();
  await page.keyboard.type(line, { delay: 5 });
  await page.keyboard.press("Enter");
  return until(`shell output ${re}`, async () => {
    const m = (await rows(frame)).split("\n").map((l) => l.trim()).filter((l) => re.test(l) && !l.includes("echo"));
    return m.length ? m[m.length - 1] : null;
  });
}

/** A page on another origin that posts a form to the server (the CSRF attempt). */
function evilSite() {
  return new Promise((resolve) => {
    const srv = http.createServer((req, res) => {
      res.writeHead(200, { "Content-Type": "text/html" });
      res.end(`<!doctype html><html><body>
        <form id="f" method="POST" action="${BASE}${computerPath("stop")}" enctype="text/plain">
          <input name='{"a":"' value='b"}'>
        </form>
        <script>document.getElementById("f").submit();</script></body></html>`);
    });
    srv.listen(0, "127.0.0.1", () => {
      evil.push(srv);
      resolve(srv.address().port);
    });
  });
}

async function main() {
  const browser = await launch();
  const ctx = track(await browser.newContext({ viewport: { width: 1400, height: 900 } }));
  let page = await ctx.newPage();
  page.on("crash", () => console.log("the console page crashed"));
  watch(page, "operator page");
  const uniq = String(Math.floor(Math.random() * 1e9));

  await step("the console page carries its security headers", async () => {
    const r = await raw("GET", "/console");
    check(r.status === 200, "GET /console is 200");
    const csp = r.headers.get("content-security-policy") || "";
    for (const part of ["default-src 'self'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'", "object-src 'none'", "base-uri 'none'"])
      check(csp.includes(part), `the CSP has ${part}: ${csp}`);
    check(!/unsafe-inline|unsafe-eval/.test(csp), "no unsafe-inline or unsafe-eval");
    check(/no-store/.test(r.headers.get("cache-control") || ""), "Cache-Control: no-store");
    check(r.headers.get("x-content-type-options") === "nosniff", "nosniff");
    const html = await r.text();
    check(!/<script(?![^>]*\bsrc=)[^>]*>/i.test(html), "no inline script in index.html");
    check(!/\sstyle=/i.test(html), "no inline style attribute in index.html");
  });

  await step("sign in with an operator token; the token is kept nowhere in the page", async () => {
    const loaded = [];
    const collect = (resp) => loaded.push(resp);
    page.on("response", collect);
    await page.goto(BASE + "/console");
    await page.getByLabel("API token").waitFor();
    page.off("response", collect);
    await shot(page, "signin");
    await axe(page, "the sign-in page");
    // The first page: everything it loaded to show the sign-in form, as gzip would send it.
    let js = 0;
    let css = 0;
    let html = 0;
    // (Read again over HTTP: asking Chromium for response bodies unsettles it.)
    for (const resp of loaded.splice(0)) {
      check(!/\/assets\/(novnc|xterm)\//.test(resp.url()), "the first page loads neither noVNC nor xterm: " + resp.url());
      if (!resp.ok() || !new URL(resp.url()).pathname.startsWith("/console")) continue;
      const b = Buffer.from(await (await fetch(resp.url())).arrayBuffer());
      const z = zlib.gzipSync(b, { level: 9 }).length;
      const p = new URL(resp.url()).pathname;
      if (p.endsWith(".js")) js += z;
      else if (p.endsWith(".css")) css += z;
      else html += z;
    }
    bench.first_page_js_css_gzip_bytes = js + css;
    bench.first_page_html_gzip_bytes = html;
    await page.getByLabel("API token").fill("rkz_" + "0".repeat(64));
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("alert").filter({ hasText: "not accepted" }).waitFor({ timeout: LONG });
    check((await page.getByLabel("API token").inputValue()) === "", "the field is cleared after sending");
    await page.getByLabel("API token").fill(OPERATOR);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("button", { name: "Sign out" }).waitFor({ timeout: LONG });
    check(!page.url().includes(OPERATOR), "the token is not in the URL");
    const stored = await page.evaluate(() => JSON.stringify([Object.entries(localStorage), Object.entries(sessionStorage), document.cookie]));
    check(!stored.includes(OPERATOR), "the token is not in storage or a script-readable cookie");
    check(!(await page.content()).includes(OPERATOR), "the token is not in the page");
    check((await page.evaluate(() => document.cookie)) === "", "the session cookie is not readable by scripts");
  });

  await step("the session cookie is HttpOnly and SameSite=Strict", async () => {
    const c = (await ctx.cookies(BASE)).find((k) => k.name === "rakazo_session");
    check(c, "a rakazo_session cookie");
    check(c.httpOnly, "HttpOnly");
    check(c.sameSite === "Strict", "SameSite=Strict, got " + c.sameSite);
    check(c.path === "/", "Path=/");
    check(c.expires > Date.now() / 1000, "it expires");
    cookiesSeen.add(c.value);
  });

  await step("the computer is listed, running", async () => {
    const row = page.locator("tr", { has: page.getByRole("link", { name: COMPUTER }) });
    await row.waitFor({ timeout: LONG });
    await until("the running state", async () => /running/.test(await row.innerText()));
    await until("the bot's desktop in the list", async () => (await row.innerText()).includes(BOT), 20000, 200);
    await shot(page, "list");
    await axe(page, "the computer list");
  });

  await step("open the computer: the bot's screen shows the desktop", async () => {
    const t0 = Date.now();
    await page.getByRole("link", { name: COMPUTER }).click();
    const frame = await frameOf(page.locator(`iframe.screen-frame[data-bot="${BOT}"]`));
    await until("a desktop picture on the viewer's canvas", async () => (await canvasColours(frame)) >= 3, LONG, 20);
    bench.click_to_first_frame_ms = Date.now() - t0;
    check((await statusOf(frame)) === "connected", "the reporter says connected");
    check(!(await page.locator(".screen-failed").count()), "no failure shown");
    await page.waitForTimeout(500);
    await shot(page, "computer");
    await axe(page, "the computer view");
  });

  // The shell's websocket goes through a route of this page that the test can cut.
  const routed = [];
  await step("take control: refused while a run holds the bot, then under control with its time left", async () => {
    const lease = await acquire("run-busy");
    await page.getByRole("button", { name: "Take control" }).click();
    await page.getByText("Stop the bot first").waitFor({ timeout: LONG });
    await shot(page, "control-refused");
    await releaseLease(lease);
    await page.getByRole("button", { name: "Take control" }).click();
    await page.getByText(/You have control of .* left/).waitFor({ timeout: LONG });
    const frame = await frameOf(page.locator(`iframe.screen-frame[data-policy="control"]`));
    await until("the control screen connected", async () => (await statusOf(frame)) === "connected");
    await until("its canvas shows the desktop", async () => (await canvasColours(frame)) >= 3);
    await shot(page, "control");
  });

  let pid = null;
  let shellFrame = null;
  await step("the Shell opens under control; typed input comes back as output", async () => {
    // Only this page's frames opened from now on (the shell's) go through Playwright's relay.
    await page.routeWebSocket(/\/cap\/[^/]+\/ws(\?|$)/, (ws) => {
      const server = ws.connectToServer();
      routed.push({ ws, server });
    });
    await page.getByRole("tab", { name: "Terminal" }).click();
    shellFrame = await frameOf(page.locator("iframe.shell-frame"));
    await until("the terminal connected", async () => (await statusOf(shellFrame)) === "connected");
    const out = await shellRun(page, shellFrame, "echo console-$RANDOM", /^console-\d+$/);
    check(/^console-\d+$/.test(out), "echo's output read back: " + out);
    pid = await shellRun(page, shellFrame, "echo pid-$$", /^pid-\d+$/);
    await shot(page, "shell");
    // Switching windows keeps the shell: the same frame, still connected.
    await page.getByRole("tab", { name: "Files" }).click();
    await page.getByRole("tab", { name: "Terminal" }).click();
    check((await statusOf(shellFrame)) === "connected", "the shell stayed connected across window switches");
    check((await shellRun(page, shellFrame, "echo again-$$", /^again-\d+$/)) === "again-" + pid.slice(4), "the same shell after switching windows");
    // noVNC and xterm.js run in the screen's and the shell's frames, never in the console's page.
    const own = await page.evaluate(() => performance.getEntriesByType("resource").map((e) => e.name));
    check(!own.some((u) => /\/assets\/(novnc|xterm)\//.test(u)), "the console page itself loaded noVNC or xterm");
    check(own.some((u) => u.includes("/console/assets/")), "the page's own resources are listed");
  });

  await step("a dropped shell connection comes back", async () => {
    check(routed.length >= 1, "the terminal's websocket went through the test's route");
    const before = routed.length;
    routed[routed.length - 1].ws.close({ code: 4000, reason: "dropped by the test" });
    await until("a new terminal connection", async () => routed.length > before, 20000);
    await until("the terminal connected again", async () => (await statusOf(shellFrame)) === "connected", 20000);
    const after = await shellRun(page, shellFrame, "echo back-$$", /^back-\d+$/);
    const same = after === "back-" + pid.slice(4);
    bench.shell_reattached_same_shell = same ? 1 : 0;
    console.log(`shell after the drop: ${same ? "the same shell" : "a new shell"} (${pid} then ${after})`);
    // The terminal page resumes its shell (docs/screens.md#reconnecting): the same one is back.
    check(same, "the same shell came back after the drop");
    await shot(page, "shell-reconnected");
    // The rest runs in a page without the relay (its websocket stand-in does not carry noVNC
    // well): the same session, control taken again (a renewal: the same lease).
    const fresh = await ctx.newPage();
    fresh.on("crash", () => console.log("the console page crashed"));
    watch(fresh, "operator page");
    await fresh.goto(`${BASE}/console#/c/${COMPUTER}/${BOT}`);
    await fresh.getByRole("button", { name: "Take control" }).click({ timeout: LONG });
    await fresh.getByText(/You have control of .* left/).waitFor({ timeout: LONG });
    await page.close();
    page = fresh;
    const frame = await frameOf(page.locator(`iframe.screen-frame[data-policy="control"]`));
    await until("the control screen connected", async () => (await statusOf(frame)) === "connected");
  });

  const upName = `console-upload-${uniq}.txt`;
  const dropName = `console-drop-${uniq}.txt`;
  await step("upload a file under control and see it in Files; drag and drop too", async () => {
    await page.getByRole("tab", { name: "Files" }).click();
    await page.locator("#upload-file").setInputFiles({ name: upName, mimeType: "text/plain", buffer: Buffer.from(`uploaded from the console ${uniq}\n`) });
    await page.getByText(`uploaded to bots/${BOT}/uploads/${upName}`).waitFor({ timeout: LONG });
    await page.getByRole("button", { name: "File " + upName }).waitFor({ timeout: LONG });
    await page.evaluate((name) => {
      const dt = new DataTransfer();
      dt.items.add(new File([`dropped ${name}\n`], name, { type: "text/plain" }));
      const target = document.querySelector(".files");
      target.dispatchEvent(new DragEvent("dragover", { dataTransfer: dt, bubbles: true, cancelable: true }));
      target.dispatchEvent(new DragEvent("drop", { dataTransfer: dt, bubbles: true, cancelable: true }));
    }, dropName);
    await page.getByRole("button", { name: "File " + dropName }).waitFor({ timeout: LONG });
    await page.getByRole("button", { name: "File " + upName }).click();
    await page.locator(".preview pre").getByText(`uploaded from the console ${uniq}`).waitFor({ timeout: LONG });
    await shot(page, "files");
    // Over the server's limit: refused (413), and the message says the limit.
    await page.locator("#upload-file").setInputFiles({ name: `too-big-${uniq}.bin`, mimeType: "application/octet-stream", buffer: Buffer.alloc(UPLOAD_LIMIT + 4096, 7) });
    await page.locator(".upload .error", { hasText: String(UPLOAD_LIMIT) }).waitFor({ timeout: LONG });
    await shot(page, "upload-too-large");
  });

  await step("a bot command appears in Activity and Files refreshes, without a reload", async () => {
    const made = `from-bot-${uniq}.txt`;
    await page.evaluate((marker) => {
      window.__seen = {};
      const look = () => {
        for (const li of document.querySelectorAll(".events li"))
          if (li.textContent.includes(marker) && !window.__seen.row) window.__seen.row = Date.now();
        for (const b of document.querySelectorAll(".entries button"))
          if (b.textContent.includes(marker) && !window.__seen.file) window.__seen.file = Date.now();
      };
      new MutationObserver(look).observe(document.body, { subtree: true, childList: true, characterData: true });
    }, made);
    const navigations = [];
    page.on("framenavigated", (f) => f === page.mainFrame() && navigations.push(f.url()));
    const t0 = Date.now();
    await exec(["sh", "-c", `echo made by the bot > uploads/${made}`]);
    const seen = await until("the activity row and the file", async () => {
      const s = await page.evaluate(() => window.__seen);
      return s.row && s.file ? s : null;
    }, 20000, 20);
    bench.command_to_activity_row_ms = seen.row - t0;
    bench.command_to_files_entry_ms = seen.file - t0;
    check(navigations.length === 0, "no reload");
    await page.getByRole("tab", { name: "Activity" }).click();
    await page.locator(".events li", { hasText: made }).first().waitFor();
    const filter = page.getByLabel("Filter by bot", { exact: true });
    await filter.selectOption(BOT);
    check((await page.locator(".events li", { hasText: made }).count()) >= 1, "the bot filter keeps the bot's command");
    await shot(page, "activity");
    await filter.selectOption("");
  });

  await step("a viewer sees the screen but no take-control, shell or upload; the API refuses them", async () => {
    const vctx = track(await browser.newContext({ viewport: { width: 1400, height: 900 } }));
    const vpage = await vctx.newPage();
    watch(vpage, "viewer page");
    await signIn(vpage, VIEWER);
    cookiesSeen.add((await vctx.cookies(BASE)).find((k) => k.name === "rakazo_session").value);
    // The first screen this viewer opens stays silent (a page that never reports): after 15 s
    // the console says so and offers Retry, which opens a working screen.
    await vpage.route(/\/cap\/[^/]+$/, (route) => route.fulfill({ status: 200, contentType: "text/html", body: "<!doctype html><title>silent</title>" }), { times: 1 });
    await vpage.getByRole("link", { name: COMPUTER }).click();
    await vpage.getByText("The screen did not respond.").waitFor({ timeout: 30000 });
    await shot(vpage, "screen-failed");
    await vpage.getByRole("button", { name: "Retry" }).click();
    const frame = await frameOf(vpage.locator(`iframe.screen-frame[data-bot="${BOT}"]`));
    await until("the viewer's screen", async () => (await canvasColours(frame)) >= 3);
    check((await frame.evaluate(() => document.documentElement.dataset.policy)) === "view", "a view capability");
    await vpage.getByText("View only").waitFor();
    check((await vpage.getByRole("button", { name: "Take control" }).count()) === 0, "no Take control button");
    await vpage.getByRole("tab", { name: "Terminal" }).click();
    check((await vpage.getByRole("button", { name: "Open shell" }).count()) === 0, "no Open shell button");
    await vpage.getByRole("tab", { name: "Files" }).click();
    await vpage.locator(".entries").waitFor();
    check((await vpage.locator("#upload-file").count()) === 0, "no upload");
    check((await vpage.getByRole("button", { name: /^(Stop|Destroy)/ }).count()) === 0, "no lifecycle buttons");
    await shot(vpage, "viewer");
    await axe(vpage, "the viewer's computer view");
    // The API refuses what the UI hides, with the viewer's own session.
    const statuses = await vpage.evaluate(async ({ c, bot }) => {
      const s = await (await fetch("/console/session")).json();
      const post = async (p, body) =>
        (await fetch(`/v1/computers/${c}/${p}`, { method: "POST", headers: { "Content-Type": "application/json", "X-CSRF-Token": s.csrf }, body: JSON.stringify(body) })).status;
      return {
        role: s.role,
        control: await post(`screens/${bot}/url`, { policy: "control" }),
        view: await post(`screens/${bot}/url`, { policy: "view" }),
        takeover: await post(`screens/${bot}/takeover`, {}),
        terminal: await post(`terminals/${bot}/url`, {}),
        stop: await post("stop", {}),
      };
    }, { c: COMPUTER, bot: BOT });
    check(statuses.role === "viewer", "a viewer session");
    check(statuses.view === 200, "a viewer may watch: " + JSON.stringify(statuses));
    for (const k of ["control", "takeover", "terminal", "stop"]) check(statuses[k] === 403, `${k} refused with 403: ${JSON.stringify(statuses)}`);
    await vctx.close();
  });

  await step("a viewer of another workspace sees no computer and gets 404 for this one", async () => {
    const octx = track(await browser.newContext({ viewport: { width: 1400, height: 900 } }));
    const opage = await octx.newPage();
    watch(opage, "other viewer page");
    await signIn(opage, OTHER);
    cookiesSeen.add((await octx.cookies(BASE)).find((k) => k.name === "rakazo_session").value);
    await opage.getByText(/No computers/).waitFor({ timeout: LONG });
    const status = await opage.evaluate(async (c) => (await fetch(`/v1/computers/${c}`)).status, COMPUTER);
    check(status === 404, "404 for a computer of another workspace, got " + status);
    await opage.goto(BASE + "/console#/c/" + COMPUTER);
    await opage.getByText("No such computer").waitFor({ timeout: LONG });
    await octx.close();
  });

  await step("CSRF: a form posted from another origin or site does not stop the computer", async () => {
    const port = await evilSite();
    for (const host of ["127.0.0.1", "localhost"]) {
      const epage = await ctx.newPage();
      const answer = epage.waitForResponse((r) => r.url().endsWith("/stop"), { timeout: LONG });
      await epage.goto(`http://${host}:${port}/`);
      const r = await answer;
      // Same site, other origin: the cookie goes along, the CSRF header does not (403). Another
      // site: SameSite=Strict keeps the cookie back (401).
      check(r.status() === 403 || r.status() === 401, `the cross-origin stop from ${host} was refused, got ${r.status()}`);
      console.log(`csrf from ${host}: ${r.status()} ${await r.text().catch(() => "")}`);
      await epage.close();
    }
    await new Promise((r) => setTimeout(r, 1000));
    check((await state(OPERATOR)) === "running", "the computer still runs");
    // Also refused: a raw request with the session cookie and no CSRF header.
    const c = (await ctx.cookies(BASE)).find((k) => k.name === "rakazo_session").value;
    const r = await raw("POST", computerPath("stop"), { cookie: c, body: {} });
    check(r.status === 403, "a cookie without X-CSRF-Token is refused, got " + r.status);
    check((await r.json()).error.code === "csrf", "with code csrf");
    check((await state(OPERATOR)) === "running", "the computer still runs");
  });

  await step("phone width: the list and the computer stay usable", async () => {
    const pctx = track(await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true }));
    const ppage = await pctx.newPage();
    watch(ppage, "phone page");
    await signIn(ppage, OPERATOR);
    cookiesSeen.add((await pctx.cookies(BASE)).find((k) => k.name === "rakazo_session").value);
    await ppage.getByRole("link", { name: COMPUTER }).waitFor({ timeout: LONG });
    await shot(ppage, "phone-list", { fullPage: true });
    const overflow = await ppage.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
    check(overflow <= 1, "no sideways scrolling at phone width: " + overflow + " px");
    await ppage.getByRole("link", { name: COMPUTER }).click();
    const frame = await frameOf(ppage.locator(`iframe.screen-frame[data-bot="${BOT}"]`));
    await until("the screen at phone width", async () => (await canvasColours(frame)) >= 3);
    check((await ppage.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth)) <= 1, "no sideways scrolling in the computer view");
    await ppage.getByRole("tab", { name: "Files" }).waitFor();
    await shot(ppage, "phone-computer", { fullPage: true });
    await ppage.getByRole("button", { name: "Sign out" }).click();
    await pctx.close();
  });

  await step("release control closes the shell", async () => {
    await page.getByRole("button", { name: "Release control" }).click();
    await page.getByRole("button", { name: "Take control" }).waitFor({ timeout: LONG });
    await page.getByRole("tab", { name: "Terminal" }).click();
    await page.getByRole("button", { name: "Open shell" }).waitFor();
    check((await page.locator("iframe.shell-frame").count()) === 0, "no shell frame without control");
    // The screen goes back to watching, never to a blank frame.
    const frame = await frameOf(page.locator(`iframe.screen-frame[data-policy="view"]`));
    await until("the view screen after release", async () => (await statusOf(frame)) === "connected" && (await canvasColours(frame)) >= 3);
  });

  await step("Open shell takes control and opens a shell; releasing closes it again", async () => {
    await page.getByRole("button", { name: "Open shell" }).click();
    await page.getByText(/You have control of .* left/).waitFor({ timeout: LONG });
    const frame = await frameOf(page.locator("iframe.shell-frame"));
    await until("the new shell connected", async () => (await statusOf(frame)) === "connected");
    check(/^opened-\d+$/.test(await shellRun(page, frame, "echo opened-$$", /^opened-\d+$/)), "the shell answers");
    await page.getByRole("button", { name: "Release control" }).click();
    await page.getByRole("button", { name: "Open shell" }).waitFor({ timeout: LONG });
    check((await page.locator("iframe.shell-frame").count()) === 0, "the shell is closed with control");
  });

  await step("a run waiting for a person: a banner takes over its screen", async () => {
    const lease = await acquire("run-waiting");
    try {
      const r = await raw("POST", computerPath("leases", BOT, "waiting_takeover"), { token: OPERATOR, body: { lease } });
      check(r.ok, "waiting_takeover answered " + r.status);
      const screens = await (await raw("GET", computerPath("screens"), { token: OPERATOR })).json();
      const mine = screens.screens.find((x) => x.bot === BOT);
      check(mine && mine.run_active && mine.waiting_takeover, "the screens list reports the run waiting: " + JSON.stringify(mine));
      await page.getByRole("button", { name: "Take over " + BOT }).waitFor({ timeout: LONG });
      await shot(page, "waiting-takeover");
      await page.getByRole("button", { name: "Take over " + BOT }).click();
      await page.getByText(/You have control of .* left/).waitFor({ timeout: LONG });
      check((await page.getByRole("button", { name: "Take over " + BOT }).count()) === 0, "the banner goes once under control");
      const held = (await (await raw("GET", computerPath("screens"), { token: OPERATOR })).json()).screens.find((x) => x.bot === BOT);
      check(held.control_expires_at_ms > Date.now(), "the screens list says until when control is held");
      await page.getByRole("button", { name: "Release control" }).click();
      await page.getByRole("button", { name: "Take control" }).waitFor({ timeout: LONG });
    } finally {
      await releaseLease(lease);
    }
  });

  await step("maintenance: an update runs as a job whose progress the pill shows", async () => {
    await page.locator("summary", { hasText: "Maintenance" }).click();
    await page.getByRole("button", { name: "Update", exact: true }).click();
    // The newest job comes first.
    const newest = page.locator(".maintenance .jobs li").first().locator(".pill");
    await newest.filter({ hasText: /update (queued|running)/ }).waitFor({ timeout: LONG });
    await shot(page, "maintenance");
    await newest.filter({ hasText: "update succeeded" }).waitFor({ timeout: 240000 });
    await until("the computer running again", async () => (await state(OPERATOR)) === "running", LONG, 500);
  });

  await step("stop the computer: its stored files are still browsed and previewed", async () => {
    await page.getByRole("button", { name: "Stop", exact: true }).click();
    await page.locator(".computer-head .badge", { hasText: "stopped" }).waitFor({ timeout: 120000 });
    await page.getByRole("tab", { name: "Files" }).click();
    await page.getByText("stored home (last checkpoint)").waitFor();
    await page.getByRole("button", { name: "Folder bots" }).click({ timeout: LONG });
    await page.getByRole("button", { name: "Folder " + BOT }).click({ timeout: LONG });
    await page.getByRole("button", { name: "Folder uploads" }).click({ timeout: LONG });
    await page.getByRole("button", { name: "File " + upName }).click({ timeout: LONG });
    await page.locator(".preview pre").getByText(`uploaded from the console ${uniq}`).waitFor({ timeout: LONG });
    await shot(page, "stopped-files");
    await axe(page, "a stopped computer's files");
    await page.getByRole("tab", { name: "Activity" }).click();
    await page.locator(".events li", { hasText: "stopped" }).first().waitFor({ timeout: LONG });
  });

  await step("keyboard: the sign-in form and the list work without a mouse", async () => {
    const kctx = track(await browser.newContext({ viewport: { width: 1400, height: 900 } }));
    const kpage = await kctx.newPage();
    await kpage.goto(BASE + "/console");
    await kpage.getByLabel("API token").waitFor();
    check(await kpage.evaluate(() => document.activeElement && document.activeElement.id === "token"), "the token field has focus");
    await kpage.keyboard.type(VIEWER);
    await kpage.keyboard.press("Enter");
    await kpage.getByRole("button", { name: "Sign out" }).waitFor({ timeout: LONG });
    cookiesSeen.add((await kctx.cookies(BASE)).find((k) => k.name === "rakazo_session").value);
    await kpage.getByRole("link", { name: COMPUTER }).waitFor();
    let reached = false;
    for (let i = 0; i < 30 && !reached; i++) {
      await kpage.keyboard.press("Tab");
      reached = await kpage.evaluate((c) => document.activeElement && document.activeElement.textContent === c, COMPUTER);
    }
    check(reached, "Tab reaches the computer's link");
    await kpage.keyboard.press("Enter");
    await kpage.getByRole("heading", { name: COMPUTER }).waitFor({ timeout: LONG });
    await kctx.close();
  });

  await step("sign out: the old session cookie no longer works anywhere", async () => {
    const old = (await ctx.cookies(BASE)).find((k) => k.name === "rakazo_session").value;
    check((await raw("GET", "/console/session", { cookie: old })).status === 200, "the cookie works before");
    await page.getByRole("button", { name: "Sign out" }).click();
    await page.getByLabel("API token").waitFor({ timeout: LONG });
    await shot(page, "signed-out");
    check((await raw("GET", "/console/session", { cookie: old })).status === 401, "GET /console/session: 401");
    check((await raw("GET", "/v1/computers", { cookie: old })).status === 401, "GET /v1/computers: 401");
    check((await raw("GET", computerPath(), { cookie: old })).status === 401, "GET the computer: 401");
  });

  await step("revoking a token ends its sessions", async () => {
    const s = await rawSession(REVOKED);
    check((await raw("GET", "/v1/computers", { cookie: s.cookie })).status === 200, "the session works");
    check(/HttpOnly/i.test(s.setCookie) && /SameSite=Strict/i.test(s.setCookie), "Set-Cookie flags: " + s.setCookie.replace(/=[^;]+/, "=…"));
    execFileSync(RAKAZO_BIN, ["token", "revoke", REVOKED_ID], {
      env: { PATH: process.env.PATH, RAKAZO_URL: BASE, RAKAZO_TOKEN: ADMIN },
      stdio: ["ignore", "ignore", "inherit"],
    });
    check((await raw("GET", "/v1/computers", { cookie: s.cookie })).status === 401, "the session ended with its token");
    check((await raw("GET", "/console/session", { cookie: s.cookie })).status === 401, "GET /console/session: 401");
  });

  await noViolations();
}

await finish(main, async () => {
  for (const s of evil) s.close();
  if (SECRETS_OUT) fs.writeFileSync(SECRETS_OUT, [...cookiesSeen].join("\n") + "\n", { mode: 0o600 });
  for (const [k, v] of Object.entries(bench)) console.log(`console-bench: ${k}=${v}`);
});

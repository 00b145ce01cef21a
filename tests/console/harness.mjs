// What the console's browser tests share (console.test.mjs, history.test.mjs): the run's state
// (server, screenshot folder, browser, counts), steps, checks, raw HTTP, sign-in, axe-core and
// the CSP and page-error watch. Each script sets `run.base` and `run.shots` first.
import { chromium } from "playwright-core";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const AXE = fs.readFileSync(path.join(HERE, "node_modules/axe-core/axe.min.js"), "utf8");

/** How long a step waits for the page by default. */
export const LONG = 60000;

/** The run: the server's URL, where screenshots go, the browser, and the steps' counts. */
export const run = { base: null, shots: null, browser: null, passed: 0, failed: 0 };

/** A required environment variable. */
export function env(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
}

export function check(cond, what) {
  if (!cond) throw new Error("check failed: " + what);
}

/** Starts headless Chromium (/usr/bin/chromium) for the run. */
export async function launch() {
  fs.mkdirSync(run.shots, { recursive: true });
  run.browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
  run.browser.on("disconnected", () => console.log("the browser went away"));
  return run.browser;
}

/** Runs one step; a failure is printed with a screenshot of every open page, and ends the run. */
export async function step(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    run.passed += 1;
    console.log(`ok   ${name} (${Date.now() - t0} ms)`);
  } catch (e) {
    run.failed += 1;
    console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
    if (run.browser) {
      let i = 0;
      for (const ctx of run.browser.contexts())
        for (const p of ctx.pages()) await p.screenshot({ path: path.join(run.shots, `failure-${i++}.png`) }).catch(() => {});
    }
    throw e;
  }
}

/** A screenshot of a page or an element, named `name`.png in the run's folder. */
export const shot = (page, name, opts = {}) => page.screenshot(Object.assign({ path: path.join(run.shots, name + ".png") }, opts));

/** A raw request to the server, as any HTTP client would send it (no browser). */
export async function raw(method, p, { cookie, token, csrf, body } = {}) {
  const headers = {};
  if (cookie) headers.Cookie = "rakazo_session=" + cookie;
  if (token) headers.Authorization = "Bearer " + token;
  if (csrf) headers["X-CSRF-Token"] = csrf;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  return fetch(run.base + p, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), redirect: "manual" });
}

/** Runs axe-core in `page` (not in its capability iframes): no serious or critical violation. */
export async function axe(page, where) {
  await page.evaluate(AXE);
  const result = await page.evaluate(() => window.axe.run(document, { iframes: false, resultTypes: ["violations"] }));
  const bad = result.violations.filter((v) => v.impact === "serious" || v.impact === "critical");
  for (const v of result.violations)
    console.log(`axe ${where}: ${v.impact} ${v.id} (${v.nodes.length}): ${v.help} — ${v.nodes.slice(0, 3).map((n) => n.target.join(" ")).join(", ")}`);
  check(bad.length === 0, `axe found ${bad.length} serious or critical violation(s) on ${where}`);
}

/** Fails on any Content-Security-Policy violation or page error in the console page itself. */
export function watch(page, label) {
  page.on("console", (m) => {
    const t = m.text();
    if (/Content Security Policy|Refused to/i.test(t)) {
      console.log(`${label}: ${t}`);
      watch.violations.push(t);
    }
  });
  page.on("pageerror", (e) => {
    // Playwright's own websocket stand-in (the route that cuts the shell's connection) complains
    // when the page drops a frame it served: not the console's error.
    if (/Raw channel missing property/.test(e.message)) return;
    console.log(`${label}: page error ${e.message}`);
    watch.errors.push(e.message);
  });
}
watch.violations = [];
watch.errors = [];

/** The step that checks the watch: no CSP violation and no page error all run long. */
export const noViolations = () =>
  step("no CSP violation and no page error in the console", async () => {
    check(watch.violations.length === 0, "CSP violations: " + watch.violations.join(" | "));
    check(watch.errors.length === 0, "page errors: " + watch.errors.join(" | "));
  });

/**
 * Runs the script's `main`, then `cleanup` and closes the browser whatever happened; prints the
 * counts and exits 0 only when every step passed.
 */
export async function finish(main, cleanup = async () => {}) {
  let code = 0;
  try {
    await main();
  } catch (e) {
    code = 1;
    // A step has printed its own failure; anything else is said here.
    if (!run.failed) console.log(`FAIL before any step failed: ${e && e.stack ? e.stack : e}`);
  } finally {
    await cleanup();
    if (run.browser) await run.browser.close().catch(() => {});
    console.log(`${run.passed} passed, ${run.failed} failed`);
  }
  process.exit(code);
}

export async function signIn(page, token) {
  await page.goto(run.base + "/console");
  await page.getByLabel("API token").fill(token);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("button", { name: "Sign out" }).waitFor({ timeout: LONG });
}

export async function until(what, fn, timeout = LONG, every = 50) {
  const deadline = Date.now() + timeout;
  let last;
  for (;;) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeout} ms waiting for ${what} (last: ${last})`);
    await new Promise((r) => setTimeout(r, every));
  }
}

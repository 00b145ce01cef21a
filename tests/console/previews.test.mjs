// Preview URLs in real Chromium (issue 33, docs/previews.md), against a real `rakazo serve` whose
// computer runs tests/scripts/preview_app.py. tests/system/previews.rs makes the previews with
// the real CLI and runs this script with everything in the environment (never in argv):
//
//   RAKAZO_PREVIEW_LINK       a link preview's URL (port of app "alpha")
//   RAKAZO_PREVIEW_PUBLIC     a public preview's URL of the same port: another origin
//   RAKAZO_PREVIEW_SESSION    a session preview's URL
//   RAKAZO_PREVIEW_EXPIRED    a preview URL that has expired
//   RAKAZO_PREVIEW_CONSOLE    the console's origin (http://localhost:PORT)
//   RAKAZO_PREVIEW_OPERATOR   an operator token of the computer's workspace (console sign-in)
//   RAKAZO_PREVIEW_REVOKE     a shell command line that revokes the link preview (the real CLI)
//   RAKAZO_PREVIEW_STOP       a shell command line that stops the computer (the real CLI): a
//                             visit then wakes it
//   RAKAZO_PREVIEW_SHOTS      where to write screenshots
//   RAKAZO_PREVIEW_NAME       the app's name the page greets with
//   RAKAZO_PREVIEW_EXPECT_H2  1: the server speaks TLS (a self-signed certificate) and the page
//                             must come over HTTP/2
//
// It exits 0 only when every step passed, printing `N passed, 0 failed`.
import { chromium } from "playwright-core";
import { execSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
};
const LINK = env("RAKAZO_PREVIEW_LINK");
const PUBLIC = env("RAKAZO_PREVIEW_PUBLIC");
const SESSION = process.env.RAKAZO_PREVIEW_SESSION || null;
const EXPIRED = process.env.RAKAZO_PREVIEW_EXPIRED || null;
const CONSOLE = process.env.RAKAZO_PREVIEW_CONSOLE || null;
const OPERATOR = process.env.RAKAZO_PREVIEW_OPERATOR || null;
const REVOKE = process.env.RAKAZO_PREVIEW_REVOKE || null;
const STOP = process.env.RAKAZO_PREVIEW_STOP || null;
const SHOTS = env("RAKAZO_PREVIEW_SHOTS");
const NAME = env("RAKAZO_PREVIEW_NAME");
const H2 = process.env.RAKAZO_PREVIEW_EXPECT_H2 === "1";
const LONG = 30000;

fs.mkdirSync(SHOTS, { recursive: true });
let passed = 0;
let failed = 0;

function check(cond, what) {
  if (!cond) throw new Error("check failed: " + what);
}

async function step(name, fn) {
  try {
    await fn();
    passed++;
    console.log(`ok   ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e.stack || e}`);
  }
}

const origin = (url) => new URL(url).origin;
// Other tests create network namespaces and veth links while this runs; Chromium takes a new
// interface for a network change and fails what was in flight with ERR_NETWORK_CHANGED. Such a
// navigation is tried again (a few times); any other failure stands.
async function goto(p, url) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await p.goto(url, { timeout: LONG });
    } catch (e) {
      if (attempt >= 5 || !String(e).includes("ERR_NETWORK_CHANGED")) throw e;
      await p.waitForTimeout(200);
    }
  }
}
// Node's resolver knows no `*.localhost` (Chromium's does): read through the page.
async function text(p, url) {
  const resp = await goto(p, url);
  check(resp.ok(), `${url}: status ${resp.status()}`);
  return await p.evaluate(() => document.body.innerText);
}

const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu"],
});
try {
  // The TLS run's certificate is self-signed: trusting it is the point of no test here.
  const ctx = await browser.newContext({ viewport: { width: 1000, height: 600 }, ignoreHTTPSErrors: true });
  const page = await ctx.newPage();

  await step("the link preview opens the app, whose websocket and event stream work", async () => {
    // The app is a service that may still be starting: its preview says 502 until it listens.
    let resp = await goto(page, LINK);
    for (let i = 0; i < 100 && resp.status() === 502; i++) {
      await page.waitForTimeout(200);
      resp = await goto(page, LINK);
    }
    check(resp.ok(), `status ${resp.status()}`);
    check(page.url() === origin(LINK) + "/", `the link lands on the origin's root: ${page.url()}`);
    await page.waitForSelector(`text=Hello from ${NAME} inside the computer`, { timeout: LONG });
    await page.waitForSelector("#ws.ok", { timeout: LONG });
    await page.waitForSelector("#sse.ok", { timeout: LONG });
    check((await page.textContent("#ws")) === "echo:ping over the tunnel", "the websocket echo");
    const events = await page.textContent("#sse");
    check(events === "tick 1, tick 2, tick 3", `the three events: ${events}`);
    await page.screenshot({ path: path.join(SHOTS, `preview-${NAME}.png`) });
    const proto = await page.evaluate(() => performance.getEntriesByType("navigation")[0].nextHopProtocol);
    check(!H2 || proto === "h2", `the page came over ${proto}`);
    console.log(`     (page over ${proto})`);
  });

  await step("the preview's cookie is HttpOnly, on its own origin only, and never reaches the app", async () => {
    const cookies = await ctx.cookies(origin(LINK));
    const ours = cookies.find((c) => c.name === "rakazo_preview");
    check(ours && ours.httpOnly && ours.sameSite === "Lax", `the cookie: ${JSON.stringify(ours)}`);
    check(ours.domain === new URL(LINK).hostname, `host-only: ${ours.domain}`);
    const headers = JSON.parse(await text(page, origin(LINK) + "/headers"));
    check(!(headers.cookie || "").includes("rakazo_preview"), `the app got our cookie: ${headers.cookie}`);
    check(headers.host.startsWith("localhost:"), `the app's Host: ${headers.host}`);
    const label = new URL(LINK).hostname.split(".")[0];
    check(!JSON.stringify(headers).includes(label), "the preview's label reached the app");
  });

  await step("two previews' cookies stay apart", async () => {
    await goto(page, origin(LINK) + "/cookie?set=from-link");
    await goto(page, PUBLIC + "cookie?set=from-public");
    const seenByPublic = await text(page, PUBLIC + "cookie");
    const seenByLink = await text(page, origin(LINK) + "/cookie");
    check(seenByPublic.includes("app=from-public") && !seenByPublic.includes("from-link"), `public saw: ${seenByPublic}`);
    check(seenByLink.includes("app=from-link") && !seenByLink.includes("from-public"), `link saw: ${seenByLink}`);
  });

  await step("the link preview's origin alone lets nobody in", async () => {
    const fresh = await browser.newContext({ ignoreHTTPSErrors: true });
    const p = await fresh.newPage();
    const resp = await goto(p, origin(LINK) + "/");
    check(resp.status() === 403, `status ${resp.status()}`);
    check(!(await p.content()).includes("inside the computer"), "the app answered without the link");
    const bad = await goto(p, origin(LINK) + "/__rakazo/open?t=AQYAAAAAAAAAAAAAAAAAAAAA");
    check(bad.status() === 403, `a forged token: ${bad.status()}`);
    await fresh.close();
  });

  if (SESSION) {
    await step("a session preview without a console session is refused", async () => {
      const fresh = await browser.newContext();
      const p = await fresh.newPage();
      await goto(p, SESSION);
      check(p.url().startsWith(CONSOLE + "/console/preview"), `sent to sign in: ${p.url()}`);
      await p.click("text=Continue to the preview");
      await p.waitForLoadState();
      check((await p.content()).includes("Sign in first"), "told to sign in");
      check(!(await p.content()).includes("inside the computer"), "the app answered without a session");
      await p.screenshot({ path: path.join(SHOTS, "preview-session-refused.png") });
      await fresh.close();
    });

    await step("with a console session that sees the computer, the session preview opens", async () => {
      const fresh = await browser.newContext();
      const signIn = await fresh.request.post(CONSOLE + "/console/session", {
        data: { token: OPERATOR },
        headers: { "Content-Type": "application/json", Origin: CONSOLE },
      });
      check(signIn.ok(), `console sign-in: ${signIn.status()}`);
      const p = await fresh.newPage();
      await goto(p, SESSION);
      check(p.url().startsWith(CONSOLE + "/console/preview"), `sent to the console: ${p.url()}`);
      await p.click("text=Continue to the preview");
      await p.waitForSelector(`text=Hello from ${NAME} inside the computer`, { timeout: LONG });
      check(origin(p.url()) === origin(SESSION), `back on the preview: ${p.url()}`);
      await fresh.close();
    });
  }

  if (EXPIRED) {
    await step("an expired preview is refused", async () => {
      const resp = await goto(page, EXPIRED);
      check(resp.status() === 410, `status ${resp.status()}`);
      check((await page.content()).includes("expired"), "it says so");
    });
  }

  if (REVOKE) {
    await step("a revoked preview is refused at once", async () => {
      await goto(page, origin(LINK) + "/");
      await page.waitForSelector("#sse.ok", { timeout: LONG });
      execSync(REVOKE, { stdio: "inherit" });
      const resp = await goto(page, origin(LINK) + "/");
      check(resp.status() === 410, `status ${resp.status()}`);
      check((await page.content()).includes("revoked"), "it says so");
      await page.screenshot({ path: path.join(SHOTS, "preview-revoked.png") });
    });
  }

  if (STOP) {
    await step("a visit to a stopped computer gets a page that retries until the app answers", async () => {
      execSync(STOP, { stdio: "inherit" });
      const resp = await goto(page, PUBLIC);
      check(resp.status() === 503, `the first answer: ${resp.status()}`);
      check((await page.content()).includes("Starting"), "the starting page");
      await page.screenshot({ path: path.join(SHOTS, "preview-starting.png") });
      // The page reloads by itself (Refresh: 2) until the computer and its service are up.
      await page.waitForSelector(`text=Hello from ${NAME} inside the computer`, { timeout: 90000 });
      await page.waitForSelector("#sse.ok", { timeout: LONG });
    });
  }
} finally {
  await browser.close();
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);

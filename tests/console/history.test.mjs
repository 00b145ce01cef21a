// The console's History window (issue 32) in real Chromium, against a real `rakazo serve` with a
// local computer whose home has two revisions. tests/system/console.rs makes the computer, its
// revisions and the tokens, then runs this script with everything in the environment:
//
//   RAKAZO_CONSOLE_URL              the server, http://127.0.0.1:PORT
//   RAKAZO_CONSOLE_COMPUTER         a running computer with revisions 1 and 2 (cause `manual`):
//                                   1 has notes.txt "v1"; 2 has notes.txt "v2" and added.txt
//   RAKAZO_CONSOLE_OPERATOR_TOKEN   an operator of its workspace and of RAKAZO_CONSOLE_FORK_WORKSPACE
//   RAKAZO_CONSOLE_VIEWER_TOKEN     a viewer of its workspace
//   RAKAZO_CONSOLE_FORK_WORKSPACE   a workspace with no home yet, to fork revision 1 into
//   RAKAZO_CONSOLE_SCREENSHOTS      where the screenshots go (history.png, fork.png, phone-history.png)
//
// It exits 0 only when every step passed, and prints the fork's id as `history-fork: <id>`.
import { LONG, axe, check, env, finish, launch, noViolations, raw, run, shot, signIn, step, until, watch } from "./harness.mjs";

run.base = env("RAKAZO_CONSOLE_URL").replace(/\/+$/, "");
run.shots = env("RAKAZO_CONSOLE_SCREENSHOTS");
const COMPUTER = env("RAKAZO_CONSOLE_COMPUTER");
const OPERATOR = env("RAKAZO_CONSOLE_OPERATOR_TOKEN");
const VIEWER = env("RAKAZO_CONSOLE_VIEWER_TOKEN");
const FORK_WORKSPACE = env("RAKAZO_CONSOLE_FORK_WORKSPACE");

const computerPath = (...rest) => "/v1/computers/" + [COMPUTER, ...rest].map(encodeURIComponent).join("/");

/** The History window's revision rows, top to bottom: [revision, cause]. */
const listed = (page) =>
  page.locator("#win-history table.revisions tbody tr").evaluateAll((trs) => trs.map((tr) => [Number(tr.dataset.revision), tr.querySelector(".cause").textContent]));

/** The live file's content, read through the API. */
async function liveFile(p) {
  const r = await raw("GET", computerPath("files", "content") + "?path=" + encodeURIComponent(p), { token: OPERATOR });
  return r.ok ? r.text() : "HTTP " + r.status;
}

/** Signs in in a new context and opens the computer's History window. */
async function openHistory(browser, token, viewport, label) {
  const ctx = await browser.newContext({ viewport });
  const page = await ctx.newPage();
  watch(page, label);
  await signIn(page, token);
  await page.goto(run.base + "/console#/c/" + encodeURIComponent(COMPUTER));
  await page.getByRole("tab", { name: "History" }).click();
  await page.locator("#win-history tr[data-revision]").first().waitFor({ timeout: LONG });
  return page;
}

async function main() {
  const browser = await launch();
  const page = await openHistory(browser, OPERATOR, { width: 1400, height: 900 }, "operator page");
  const history = page.locator("#win-history");
  const dock = page.locator("aside.dock");
  let fork = null;

  await step("History lists the revisions newest first, with their causes", async () => {
    const rows = await listed(page);
    check(JSON.stringify(rows) === JSON.stringify([[2, "manual"], [1, "manual"]]), "rows: " + JSON.stringify(rows));
    check(await history.getByText("Select a revision").isVisible(), "a hint to select one");
  });

  await step("a revision shows its changes since the previous one and its files", async () => {
    await history.getByRole("button", { name: "Revision 2", exact: true }).click();
    const changes = history.getByRole("list", { name: "Changed paths, revision 1 to 2" });
    await changes.waitFor({ timeout: LONG });
    const lines = await changes.locator("li").evaluateAll((lis) => lis.map((li) => li.className + " " + li.querySelector("code").textContent));
    check(JSON.stringify(lines) === JSON.stringify(["change-added added.txt", "change-changed notes.txt"]), "the changes: " + JSON.stringify(lines));
    const files = history.getByRole("list", { name: "Files in home at revision 2" });
    await files.waitFor({ timeout: LONG });
    await files.getByRole("button", { name: "File notes.txt" }).click();
    await until("the preview of revision 2's notes.txt", async () => (await history.locator(".preview pre").textContent()) === "v2\n");
    await axe(page, "the History window");
    await shot(dock, "history");
  });

  await step("restore the older revision: confirm, follow it, the file goes back", async () => {
    await history.getByRole("button", { name: "Revision 1", exact: true }).click();
    await history.getByRole("list", { name: "Files in home at revision 1" }).waitFor({ timeout: LONG });
    check(await history.getByText("The oldest revision kept").isVisible(), "revision 1 has nothing before it");
    check((await liveFile("notes.txt")) === "v2\n", "the live notes.txt is v2 before");
    await history.getByRole("button", { name: "Restore this revision" }).click();
    const confirm = history.getByRole("group", { name: "Confirm restore" });
    check(/checkpointed first/.test(await confirm.textContent()), "the confirmation says the present is saved first");
    await confirm.getByRole("button", { name: "Restore revision 1" }).click();
    const flow = history.getByRole("status", { name: "Restore of revision 1" });
    await flow.locator("li.ok").waitFor({ timeout: LONG });
    const done = await flow.locator("li.ok").textContent();
    // A running computer is checkpointed first (revision 3), then revision 1 comes back as 4.
    check(/^Restored revision 1 as revision 4 \(/.test(done), "the result line: " + done);
    check((await liveFile("notes.txt")) === "v1\n", "the live notes.txt is v1 again");
    check((await liveFile("added.txt")).startsWith("HTTP 404"), "added.txt is gone");
    await until("the refreshed list", async () => JSON.stringify((await listed(page)).slice(0, 2)) === JSON.stringify([[4, "restore"], [3, "manual"]]));
  });

  await step("fork revision 1 into a new workspace and follow the link to it", async () => {
    await history.getByRole("button", { name: "Fork…" }).click();
    const form = history.locator("form.fork-form");
    await form.getByLabel("Workspace").fill(FORK_WORKSPACE);
    await form.getByRole("button", { name: "Fork", exact: true }).click();
    const made = history.locator(".fork-made");
    await made.waitFor({ timeout: LONG });
    fork = (await made.getByRole("link").textContent()).trim();
    check(fork && fork !== COMPUTER, "a new computer's id: " + fork);
    check((await made.textContent()).includes("workspace " + FORK_WORKSPACE), "the notice names the workspace");
    const r = await raw("GET", "/v1/computers/" + encodeURIComponent(fork), { token: OPERATOR });
    check(r.ok, "the fork exists: GET answered " + r.status);
    check((await r.json()).workspace === FORK_WORKSPACE, "the fork is in " + FORK_WORKSPACE);
    await shot(dock, "fork");
    await made.getByRole("link").click();
    await until("the fork's view", async () => (await page.locator("#computer-title").textContent()) === fork);
    console.log("history-fork: " + fork);
  });

  await step("a viewer sees History but no Restore or Fork", async () => {
    const vpage = await openHistory(browser, VIEWER, { width: 1400, height: 900 }, "viewer page");
    const vh = vpage.locator("#win-history");
    await vh.getByRole("button", { name: "Revision 1", exact: true }).click();
    await vh.getByRole("list", { name: "Files in home at revision 1" }).waitFor({ timeout: LONG });
    check((await vh.getByRole("button", { name: "Restore this revision" }).count()) === 0, "no Restore for a viewer");
    check((await vh.getByRole("button", { name: "Fork…" }).count()) === 0, "no Fork for a viewer");
    await vpage.context().close();
  });

  await step("at phone width History fits, and a store without revisions says so", async () => {
    const ppage = await openHistory(browser, VIEWER, { width: 390, height: 844 }, "phone page");
    const ph = ppage.locator("#win-history");
    await ph.getByRole("button", { name: "Revision 2", exact: true }).click();
    await ph.getByRole("list", { name: "Files in home at revision 2" }).waitFor({ timeout: LONG });
    const wide = await ppage.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    check(wide <= 1, `the page is ${wide} px wider than the phone`);
    await ph.scrollIntoViewIfNeeded();
    await shot(ppage, "phone-history", { fullPage: true });
    // As a control plane run with --home-format archive answers.
    await ppage.route("**/home/revisions", (route) =>
      route.fulfill({
        status: 409,
        contentType: "application/json",
        body: JSON.stringify({ error: { code: "home_not_incremental", message: "the home store keeps no revisions" } }),
      }),
    );
    await ph.getByRole("button", { name: "Refresh" }).click();
    await ph.getByRole("alert").filter({ hasText: "whole-archive checkpoints only (--home-format archive)" }).waitFor({ timeout: LONG });
    await ppage.context().close();
  });

  await noViolations();
}

await finish(main);

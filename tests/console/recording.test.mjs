// Screen recordings in the console (issue 34, docs/recordings.md) in real Chromium, against a real
// `rakazo serve` whose computer is recorded. tests/system/recordings.rs turns recording on with
// the CLI, runs the bot's agent phase (clicks and typing through the API), then this script:
//
//   RAKAZO_CONSOLE_URL              the server, http://127.0.0.1:PORT
//   RAKAZO_CONSOLE_COMPUTER         the recorded computer
//   RAKAZO_CONSOLE_BOT              its bot, whose run has ended (its desktop stays)
//   RAKAZO_CONSOLE_OPERATOR_TOKEN   an operator of its workspace
//   RAKAZO_CONSOLE_SCREENSHOTS      where the screenshots go
//
// The takeover phase: a person takes control in the console, clicks the page's box and types,
// and releases control. Then the Recordings window lists the bot; the player shows the agent's
// phase, seeks to the person's click (the screen shows what the person saw) and plays.
import { LONG, check, env, finish, launch, noViolations, run, shot, signIn, step, until, watch } from "./harness.mjs";

run.base = env("RAKAZO_CONSOLE_URL").replace(/\/+$/, "");
run.shots = env("RAKAZO_CONSOLE_SCREENSHOTS");
const COMPUTER = env("RAKAZO_CONSOLE_COMPUTER");
const BOT = env("RAKAZO_CONSOLE_BOT");
const OPERATOR = env("RAKAZO_CONSOLE_OPERATOR_TOKEN");

async function frameOf(locator) {
  const handle = await locator.elementHandle({ timeout: LONG });
  return until("the iframe's document", () => handle.contentFrame());
}

const statusOf = (frame) => frame.evaluate(() => document.documentElement.getAttribute("data-rakazo-status") || "");

/** The colour of the player's canvas at (x, y) of the recorded screen, as "r,g,b". */
const playerPixel = (page, x, y) =>
  page.evaluate(
    ([x, y]) => {
      const c = document.querySelector(".player-screen canvas");
      const d = c.getContext("2d").getImageData(x, y, 1, 1).data;
      return `${d[0]},${d[1]},${d[2]}`;
    },
    [x, y],
  );

/** Steps the player forward 50 ms at a time (a frame lands up to 200 ms after its input) until
 * the box shows `colour`, or 2 s have passed. */
async function forward(page, colour) {
  const slider = page.getByRole("slider", { name: "Position in the recording" });
  for (let i = 0; i < 40 && (await playerPixel(page, 640, 480)) !== colour; i++) {
    await slider.press("ArrowRight");
    await page.waitForTimeout(60);
  }
}

/** The timeline's entries: [who, what]. */
const timeline = (page) =>
  page.locator(".timeline li").evaluateAll((lis) => lis.map((li) => [li.querySelector(".who").textContent, li.textContent]));

async function main() {
  const browser = await launch();
  const ctx = await browser.newContext({ viewport: { width: 1500, height: 950 } });
  const page = await ctx.newPage();
  watch(page, "operator page");
  await signIn(page, OPERATOR);
  await page.goto(run.base + "/console#/c/" + encodeURIComponent(COMPUTER) + "/" + encodeURIComponent(BOT));

  await step("a person takes control, clicks the page's box and types, then releases", async () => {
    await page.getByRole("button", { name: "Take control" }).click({ timeout: LONG });
    await page.getByText(/You have control of .* left/).waitFor({ timeout: LONG });
    const frame = await frameOf(page.locator(`iframe.screen-frame[data-policy="control"]`));
    await until("the control screen connected", async () => (await statusOf(frame)) === "connected");
    // The recorded page's box fills the middle of the screen: a click anywhere central hits it.
    const canvas = frame.locator("canvas").first();
    const box = await canvas.boundingBox();
    check(box && box.width > 100, "the control canvas has a size");
    await page.mouse.click(box.x + box.width * 0.5, box.y + box.height * 0.6);
    await page.keyboard.type("xyz", { delay: 40 });
    await page.keyboard.press("Enter");
    await page.waitForTimeout(1500);
    await shot(page, "recording-takeover");
    await page.getByRole("button", { name: "Release control" }).click();
    await page.getByRole("button", { name: "Take control" }).waitFor({ timeout: LONG });
  });

  await step("the Recordings window lists the bot's recording, with both phases in it", async () => {
    await page.getByRole("tab", { name: "Recordings" }).click();
    await page.getByText("Recording this computer's screens").waitFor({ timeout: LONG });
    // The server pulls the recording every 2 s, the window lists it every 5 s and the player
    // loads what grew: wait until the recording's end shows the person's click's effect.
    await page.getByRole("button", { name: BOT, exact: true }).click({ timeout: LONG });
    await until(
      "the person's click and its effect in the player",
      async () => {
        const slider = page.getByRole("slider", { name: "Position in the recording" });
        if (!(await slider.count())) return null;
        await slider.fill(await slider.getAttribute("max"));
        await page.waitForTimeout(150);
        const clicks = await page.locator(".timeline li.by-person", { hasText: "click left" }).count();
        return clicks && (await playerPixel(page, 640, 480)) === "37,99,235" ? true : null;
      },
      LONG,
      500,
    );
    const rows = await timeline(page);
    check(rows.some(([who, what]) => who === "agent" && /click left at 640,300/.test(what)), "the agent's click: " + JSON.stringify(rows));
    check(rows.some(([who, what]) => who === "agent" && /typed 13 characters/.test(what)), "the agent's typing, as a count");
    check(rows.some(([who, what]) => who === "person" && /click left at/.test(what)), "the person's click");
    check(rows.some(([who, what]) => who === "person" && /typed 3 characters/.test(what)), "the person's typing, as a count");
    check(!rows.some(([, what]) => /hunter2|xyz/.test(what)), "no typed text in the timeline");
  });

  await step("the player shows the agent's phase, then seeks to the person's click", async () => {
    // At the start: the page as the agent found it (grey box).
    await page.locator(".player-screen canvas").first().waitFor({ timeout: LONG });
    await until("the first frame drawn", async () => (await playerPixel(page, 640, 480)) !== "0,0,0");
    await shot(page, "recording-player-start");
    // The agent's click turned the box blue.
    const agentClick = page.locator(".timeline li.by-agent button", { hasText: "click left at 640,300" });
    await agentClick.click();
    await forward(page, "37,99,235");
    check((await playerPixel(page, 640, 480)) === "37,99,235", "the agent's blue box: " + (await playerPixel(page, 640, 480)));
    await shot(page, "recording-player-agent");
    // The run's end checkpointed the home, which restarts Chrome: the page came back grey, as
    // the person found it; the person's click turned it blue again.
    const personClick = page.locator(".timeline li.by-person button", { hasText: "click left at" }).first();
    await personClick.click();
    await until("the page as the person found it", async () => (await playerPixel(page, 640, 480)) === "128,128,128", 10000);
    await shot(page, "recording-player-before-person");
    await forward(page, "37,99,235");
    check((await playerPixel(page, 640, 480)) === "37,99,235", "the person's click: " + (await playerPixel(page, 640, 480)));
    check((await page.locator(".timeline li.current").count()) === 1, "the current entry is marked");
    await shot(page, "recording-player-person");
  });

  await step("play at 2x moves through the recording", async () => {
    await page.getByRole("slider", { name: "Position in the recording" }).fill("0");
    await page.getByLabel("Speed").selectOption("2");
    const before = await page.locator(".player-time").textContent();
    await page.getByRole("button", { name: "Play", exact: true }).click();
    await page.waitForTimeout(1200);
    const after = await page.locator(".player-time").textContent();
    await page.getByRole("button", { name: "Pause", exact: true }).click();
    check(before !== after, `the position moved: ${before} -> ${after}`);
  });

  await noViolations();
}

await finish(main);

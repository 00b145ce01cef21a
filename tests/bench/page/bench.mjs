// Page-browser benchmark anchors (issue 4, "Must show" 3): Playwright's
// `page.locator('body').ariaSnapshot()` and CDP `Accessibility.getFullAXTree`, timed on the
// same Debian Chromium and the same locally served pages as rakazo's browser_snapshot.
//
// Two browsers, two modes:
//   --launch       Playwright launches /usr/bin/chromium headless with the flags below.
//   --cdp WS_URL   Playwright connects over CDP to an already running Chromium (the headed one
//                  on Xvfb that bench_page measured rakazo's snapshot in) and opens a new tab.
// Every page is loaded, warmed up (--warmup calls of each tool), then each tool is timed
// --runs times back to back. One JSON object per (mode, page, tool) is printed on stdout:
// {mode, url, tool, runs, p50_ms, p90_ms, bytes}. `bytes` is the UTF-8 size of the aria
// snapshot (YAML text) or of the AX tree result serialized as JSON (what crosses CDP).
//
// Usage: node bench.mjs (--launch | --cdp WS_URL) --runs 50 --warmup 5 URL...

import { chromium } from 'playwright-core';

const FLAGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

function parse(argv) {
  const opts = { runs: 50, warmup: 5, urls: [], launch: false, cdp: null };
  for (let i = 0; i < argv.length; i += 1) {
    const a = argv[i];
    if (a === '--launch') opts.launch = true;
    else if (a === '--cdp') opts.cdp = argv[(i += 1)];
    else if (a === '--runs') opts.runs = Number(argv[(i += 1)]);
    else if (a === '--warmup') opts.warmup = Number(argv[(i += 1)]);
    else opts.urls.push(a);
  }
  if (opts.launch === Boolean(opts.cdp) || !opts.urls.length || !(opts.runs > 0)) {
    throw new Error('usage: node bench.mjs (--launch | --cdp WS_URL) [--runs N] [--warmup N] URL...');
  }
  return opts;
}

// Nearest-rank percentile of sorted `xs`.
function percentile(xs, p) {
  return xs[Math.max(0, Math.ceil(p * xs.length) - 1)];
}

async function time(runs, warmup, call) {
  for (let i = 0; i < warmup; i += 1) await call();
  const times = [];
  let bytes = 0;
  for (let i = 0; i < runs; i += 1) {
    const started = performance.now();
    const out = await call();
    times.push(performance.now() - started);
    bytes = out;
  }
  times.sort((a, b) => a - b);
  return { p50_ms: percentile(times, 0.5), p90_ms: percentile(times, 0.9), bytes };
}

async function main() {
  const opts = parse(process.argv.slice(2));
  const mode = opts.launch ? 'playwright-headless' : 'cdp-connect';
  const browser = opts.launch
    ? await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: FLAGS })
    : await chromium.connectOverCDP(opts.cdp);
  const context = opts.launch ? await browser.newContext() : browser.contexts()[0];
  const page = await context.newPage();
  const cdp = await context.newCDPSession(page);
  for (const url of opts.urls) {
    await page.goto(url, { waitUntil: 'load' });
    const aria = await time(opts.runs, opts.warmup, async () => {
      const yaml = await page.locator('body').ariaSnapshot();
      return Buffer.byteLength(yaml, 'utf8');
    });
    console.log(JSON.stringify({ mode, url, tool: 'playwright-aria-snapshot', runs: opts.runs, ...aria }));
    const ax = await time(opts.runs, opts.warmup, async () => {
      const tree = await cdp.send('Accessibility.getFullAXTree');
      return Buffer.byteLength(JSON.stringify(tree), 'utf8');
    });
    console.log(JSON.stringify({ mode, url, tool: 'cdp-full-ax-tree', runs: opts.runs, ...ax }));
  }
  await cdp.detach();
  await page.close();
  // A launched browser is closed; a connected one is left running (its owner stops it), so
  // the process just exits, which drops the connection.
  if (opts.launch) await browser.close();
}

main().then(() => process.exit(0), (error) => {
  console.error(error);
  process.exit(1);
});

// A computer's view (docs/console.md#a-computer): its facts and lifecycle, maintenance, a tab per
// bot with its live screen and control, and the dock (Terminal, Files, Activity, History).
import { html, useCallback, useEffect, useState } from "./lib/preact.js";
import * as server from "./api.js";
import { bytes, duration, messageOf, useAction, useNow, usePoll } from "./util.js";
import { Idle, Lifecycle, Memory, StateBadge } from "./list.js";
import { Maintenance } from "./maintenance.js";
import { Screen } from "./screen.js";
import { Activity, Files, Shell, useActivity } from "./dock.js";
import { History } from "./history.js";
import { Recordings } from "./recordings.js";

const botHash = (computer, bot) => "#/c/" + encodeURIComponent(computer) + "/" + encodeURIComponent(bot);

/** Take control / release control of a bot's screen, the lease's time left and renew. */
function ControlBar({ bot, control, onTake, onRelease }) {
  const now = useNow(1000);
  const [busy, error, act] = useAction();
  const run = (what, fn) => act(fn, what);
  if (!server.can("operator"))
    return html`<div class="control-bar"><span class="muted">View only: your role (viewer) can watch, not take control.</span></div>`;
  return html`<div class="control-bar">
    ${control
      ? html`<span class="control-on" role="status">You have control of ${bot} · <span class="left">${duration(control.expires - now)} left</span></span>
          <button type="button" onClick=${() => run("renew", onTake)} disabled=${busy}>${busy === "renew" ? "Renewing…" : "Renew"}</button>
          <button type="button" onClick=${() => run("release", onRelease)} disabled=${busy}>${busy === "release" ? "Releasing…" : "Release control"}</button>`
      : html`<span class="muted">Watching ${bot} (view only).</span>
          <button type="button" class="primary" onClick=${() => run("take", onTake)} disabled=${busy}>${busy === "take" ? "Taking control…" : "Take control"}</button>`}
    ${error && html`<span class="error" role="alert">${error}</span>`}
  </div>`;
}

function AddBot({ computer }) {
  const [busy, error, act] = useAction();
  const submit = (e) => {
    e.preventDefault();
    const bot = e.currentTarget.bot.value.trim();
    if (!bot) return;
    act(async () => {
      await server.post(server.c(computer, "screens", bot, "ensure"), {});
      location.hash = botHash(computer, bot);
    });
  };
  return html`<form class="add-bot" onSubmit=${submit}>
    <label for="add-bot">Open a bot's desktop</label>
    <input id="add-bot" name="bot" autocomplete="off" placeholder="bot id" required />
    <button type="submit" disabled=${busy}>${busy ? "Starting…" : "Open"}</button>
    ${error && html`<span class="error" role="alert">${error}</span>`}
  </form>`;
}

const WINDOWS = [
  ["terminal", "Terminal"],
  ["files", "Files"],
  ["activity", "Activity"],
  ["history", "History"],
  ["recordings", "Recordings"],
];

export function ComputerView({ id, bot: routeBot }) {
  const [c, setC] = useState(null);
  const [error, setError] = useState(null);
  const [bots, setBots] = useState([]);
  const [controls, setControls] = useState({});
  const [win, setWin] = useState("files");
  const [hidden, setHidden] = useState(false);
  const [commandTick, setCommandTick] = useState(0);
  const [maintaining, setMaintaining] = useState(false);
  // Bots whose run asked for a person (`waiting_takeover`), when the server reports it per screen.
  const [waiting, setWaiting] = useState([]);
  const [takeError, setTakeError] = useState(null);
  const now = useNow(1000);
  usePoll(
    async (signal) => {
      try {
        const v = await server.get(server.c(id));
        if (!signal.aborted) {
          setC(v);
          setError(null);
        }
      } catch (e) {
        if (!signal.aborted) setError(e.status === 404 ? "No such computer (or not in your workspaces)." : messageOf(e));
      }
    },
    2000,
    [id],
  );
  const running = !!c && c.state === "running" && c.connected;
  usePoll(
    async (signal) => {
      const v = await server.get(server.c(id, "screens"));
      if (!signal.aborted) {
        setBots(v.screens.map((s) => s.bot));
        setWaiting(v.screens.filter((s) => s.waiting_takeover).map((s) => s.bot));
      }
    },
    5000,
    [id],
    running,
  );
  const feed = useActivity(id, useCallback(() => setCommandTick((t) => t + 1), []));
  // A control lease lapses on its own: forget it then (the server has closed its streams).
  useEffect(() => {
    const lapsed = Object.keys(controls).filter((b) => controls[b].expires <= now);
    if (lapsed.length) setControls((cs) => Object.fromEntries(Object.entries(cs).filter(([b]) => !lapsed.includes(b))));
  }, [now]);
  useEffect(() => {
    if (!running && Object.keys(controls).length) setControls({});
  }, [running]);

  const all = [...new Set([...bots, ...(c && c.bot ? [c.bot] : []), ...(routeBot ? [routeBot] : [])])];
  const bot = routeBot || all[0] || null;
  const control = bot ? controls[bot] : null;
  const takeOf = async (b) => {
    const v = await server.post(server.c(id, "screens", b, "takeover"), {});
    setControls((cs) => Object.assign({}, cs, { [b]: { lease: v.control_lease, expires: v.expires_at_ms } }));
  };
  const take = () => takeOf(bot);
  const release = async () => {
    try {
      await server.post(server.c(id, "screens", bot, "release-control"), {});
    } finally {
      setControls((cs) => Object.fromEntries(Object.entries(cs).filter(([b]) => b !== bot)));
    }
  };
  const openShell = async () => {
    await take();
    setWin("terminal");
    setHidden(false);
  };

  if (error && !c)
    return html`<section class="computer"><p><a href="#/">← Computers</a></p><p class="error" role="alert">${error}</p></section>`;
  if (!c) return html`<section class="computer"><p class="muted" role="status">Loading ${id}…</p></section>`;
  const m = c.machine;
  const showWin = (w) => {
    setWin(w);
    setHidden(false);
  };
  return html`<section class="computer" aria-labelledby="computer-title">
    <div class="computer-head">
      <a href="#/" class="back">← Computers</a>
      <h1 id="computer-title">${c.id}</h1>
      <${StateBadge} c=${c} />
      <${Lifecycle} c=${c} onDone=${(what) => what === "destroy" && (location.hash = "#/")} />
    </div>
    <dl class="facts">
      <div><dt>Provider</dt><dd>${c.provider}${c.placement ? " · " + c.placement : ""}</dd></div>
      <div><dt>${c.workspace ? "Workspace" : "Private to"}</dt><dd>${c.workspace || c.bot}</dd></div>
      ${c.state === "running" && html`<div><dt>Idle</dt><dd><${Idle} c=${c} now=${now} /></dd></div>`}
      ${m && html`<div><dt>Load</dt><dd>${m.load.map((l) => l.toFixed(2)).join(" ")} · ${m.cpus} CPU</dd></div>
        <div><dt>Memory</dt><dd><${Memory} m=${m} /></dd></div>
        <div><dt>Home</dt><dd>${bytes(m.home_used_bytes)} used · ${bytes(m.home_free_bytes)} free</dd></div>
        <div><dt>Up</dt><dd>${duration(m.uptime_secs * 1000)}</dd></div>`}
    </dl>
    ${error && html`<p class="error" role="alert">${error}</p>`}
    ${server.can("operator") && waiting.filter((b) => !controls[b]).map((b) => html`<div class="banner" role="alert" key=${b}>
      <span><strong>${b}</strong> is waiting for a person to take over its screen.</span>
      <button type="button" class="primary" onClick=${async () => {
        location.hash = botHash(id, b);
        setTakeError(null);
        try {
          await takeOf(b);
        } catch (e) {
          setTakeError(messageOf(e));
        }
      }}>Take over ${b}</button>
    </div>`)}
    ${takeError && html`<p class="error" role="alert">${takeError}</p>`}
    <${Maintenance} computer=${c} onActive=${setMaintaining} />
    <div class=${"stage" + (hidden ? " windows-hidden" : "")}>
      <div class="screen-area">
        ${running
          ? html`
            <div class="bot-tabs" role="tablist" aria-label="Bots">
              ${all.map((b) => html`<a role="tab" href=${botHash(id, b)} aria-selected=${b === bot ? "true" : "false"} class=${"bot-tab" + (b === bot ? " selected" : "") + (controls[b] ? " under-control" : "")}>${b}</a>`)}
            </div>
            ${all.length === 0 && html`<p class="muted">No bot has a desktop on this computer yet.</p>`}
            ${server.can("operator") && html`<${AddBot} computer=${id} />`}
            ${bot && html`<div role="tabpanel" aria-label=${"Screen of " + bot}>
              <${ControlBar} bot=${bot} control=${control} onTake=${take} onRelease=${release} />
              ${maintaining
                ? html`<div class="screen-off" role="status"><p>A maintenance job holds this computer: its screen comes back when the job is done.</p></div>`
                : html`<${Screen} key=${bot + (control ? ":control:" + control.lease : ":view")} computer=${id} bot=${bot} policy=${control ? "control" : "view"} />`}
            </div>`}`
          : html`<div class="screen-off"><p>${c.state === "stopped" ? "This computer is stopped: its screens are off. Files shows its stored home." : c.state === "running" ? "This computer's guest is not connected." : "This computer is " + c.state + "."}</p></div>`}
      </div>
      <aside class="dock" aria-label="Windows">
        <div class="dock-bar">
          <div class="dock-tabs" role="tablist" aria-label="Windows">
            ${WINDOWS.map(([w, label]) => html`<button type="button" role="tab" id=${"tab-" + w} aria-controls=${"win-" + w} aria-selected=${!hidden && win === w ? "true" : "false"} onClick=${() => showWin(w)}>${label}</button>`)}
          </div>
          <button type="button" class="quiet" aria-pressed=${hidden ? "true" : "false"} onClick=${() => setHidden(!hidden)} title="Hide the windows (their sessions stay) to see the whole screen">${hidden ? "Show windows" : "Hide windows"}</button>
        </div>
        <div class="windows">
          <div role="tabpanel" id="win-terminal" aria-labelledby="tab-terminal" class=${"window" + (win === "terminal" ? "" : " off")}>
            ${running && bot
              ? html`<${Shell} key=${bot} computer=${id} bot=${bot} control=${control} visible=${!hidden && win === "terminal"} onOpenShell=${openShell} />`
              : html`<p class="muted">The shell needs a running computer and a bot.</p>`}
          </div>
          <div role="tabpanel" id="win-files" aria-labelledby="tab-files" class=${"window" + (win === "files" ? "" : " off")}>
            <${Files} key=${running ? "live" : "stored"} computer=${id} running=${running} bot=${bot} control=${control} visible=${!hidden && win === "files"} commandTick=${commandTick} />
          </div>
          <div role="tabpanel" id="win-activity" aria-labelledby="tab-activity" class=${"window" + (win === "activity" ? "" : " off")}>
            <${Activity} feed=${feed} bots=${all} />
          </div>
          <div role="tabpanel" id="win-history" aria-labelledby="tab-history" class=${"window" + (win === "history" ? "" : " off")}>
            <${History} computer=${id} running=${running} visible=${!hidden && win === "history"} />
          </div>
          <div role="tabpanel" id="win-recordings" aria-labelledby="tab-recordings" class=${"window" + (win === "recordings" ? "" : " off")}>
            <${Recordings} computer=${id} visible=${!hidden && win === "recordings"} events=${feed.events} />
          </div>
        </div>
      </aside>
    </div>
  </section>`;
}

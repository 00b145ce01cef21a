// Recordings (docs/console.md#recordings): whether the computer's screens are recorded (operators
// turn it on and off), what was recorded of each bot, and a player: the screen as it was, with a
// timeline of the inputs (the bot's and, under takeover, a person's) and the activity feed's
// events, seeking and speed.
//
// A recording is the server's record stream (docs/recordings.md): length-prefixed JSON headers,
// frames as PNG crops pasted over the picture so far, a full frame every so often. The player
// decodes frames as it needs them (createImageBitmap) and seeks from the last full frame.
import { html, useEffect, useRef, useState } from "./lib/preact.js";
import * as server from "./api.js";
import { bytes, clock, duration, messageOf, useAction, usePoll } from "./util.js";
import { describe } from "./dock.js";

const LIST_EVERY_MS = 5000;
const SPEEDS = [0.5, 1, 2, 4, 8];
/** How long a click's mark stays on the screen, in recording time. */
const CLICK_MARK_MS = 700;

/** Reads the record stream into frames, inputs and the time span. */
export function parseRecords(buf) {
  const view = new DataView(buf);
  const text = new TextDecoder();
  const frames = [];
  const inputs = [];
  let at = 0;
  let width = 0;
  let height = 0;
  while (at + 8 <= buf.byteLength) {
    const hlen = view.getUint32(at, true);
    const head = JSON.parse(text.decode(new Uint8Array(buf, at + 4, hlen)));
    const blen = view.getUint32(at + 4 + hlen, true);
    const body = new Uint8Array(buf, at + 8 + hlen, blen);
    at += 8 + hlen + blen;
    if (head.k === "start") {
      width = head.w;
      height = head.h;
    } else if (head.k === "frame") {
      if (head.full) {
        width = head.w;
        height = head.h;
      }
      frames.push({ t: head.t, x: head.x, y: head.y, w: head.w, h: head.h, full: head.full, cx: head.cx, cy: head.cy, body });
    } else if (head.k === "input") {
      inputs.push({ t: head.t, by: head.by, what: head.what, x: head.x, y: head.y, lease: head.lease });
    } else if (head.k === "gap") {
      inputs.push({ t: head.t, by: "gap", what: head.lost + " records lost" });
    }
  }
  const times = frames.map((f) => f.t).concat(inputs.map((i) => i.t));
  return { frames, inputs, width, height, start: Math.min(...times), end: Math.max(...times) };
}

/** The player of one bot's recording; `version` (its end as listed) growing loads it again,
 * keeping the position, so a recording still being made grows while it is watched. */
function Player({ computer, bot, events, version }) {
  const [rec, setRec] = useState(null);
  const [error, setError] = useState(null);
  const [pos, setPos] = useState(0);
  const [playing, setPlaying] = useState(false);
  const [speed, setSpeed] = useState(1);
  const canvas = useRef(null);
  // The recording being drawn and what of it is on the canvas (refs: a draw in flight when a
  // longer copy of the recording arrives must not mix the two).
  const loaded = useRef(null);
  const state = useRef({ applied: -1, bitmaps: new Map(), busy: false, want: null });

  useEffect(() => {
    let gone = false;
    (async () => {
      try {
        const resp = await server.request("GET", server.c(computer, "recordings", bot), { headers: { Accept: "application/octet-stream" } });
        const r = parseRecords(await resp.arrayBuffer());
        if (!gone) {
          loaded.current = r;
          state.current = { applied: -1, bitmaps: new Map(), busy: state.current.busy, want: state.current.want };
          setError(null);
          setRec(r);
        }
      } catch (e) {
        if (!gone) setError(messageOf(e));
      }
    })();
    return () => {
      gone = true;
    };
  }, [computer, bot, version]);

  const bitmap = async (rec, s, i) => {
    let b = s.bitmaps.get(i);
    if (!b) {
      b = await createImageBitmap(new Blob([rec.frames[i].body], { type: "image/png" }));
      if (s.bitmaps.size > 400) s.bitmaps.clear();
      s.bitmaps.set(i, b);
    }
    return b;
  };

  // Draws the screen at `t` ms into the recording: forward from what is drawn, or again from
  // the last full frame before `t`.
  const draw = async (t) => {
    const rec = loaded.current;
    if (!rec || !canvas.current) return;
    if (state.current.busy) {
      state.current.want = t;
      return;
    }
    state.current.busy = true;
    const s = state.current;
    try {
      const ctx = canvas.current.getContext("2d");
      const at = rec.start + t;
      let last = -1;
      while (last + 1 < rec.frames.length && rec.frames[last + 1].t <= at) last += 1;
      let from = s.applied + 1;
      if (last < s.applied || s.applied < 0) {
        from = Math.max(0, last);
        while (from > 0 && !rec.frames[from].full) from -= 1;
      }
      for (let i = from; i <= last; i++) {
        const f = rec.frames[i];
        ctx.drawImage(await bitmap(rec, s, i), f.x, f.y);
      }
      s.applied = last;
      s.shownAt = at;
      // Marks of recent clicks over a copy-free overlay: drawn on the canvas, erased by the
      // next frame's redraw from the base (simple: redraw the overlay each time).
      const overlay = canvas.current.nextElementSibling;
      if (overlay) {
        const o = overlay.getContext("2d");
        o.clearRect(0, 0, overlay.width, overlay.height);
        for (const inp of rec.inputs) {
          if (inp.x == null || inp.t > at || at - inp.t > CLICK_MARK_MS) continue;
          o.beginPath();
          o.arc(inp.x, inp.y, 18, 0, 2 * Math.PI);
          o.lineWidth = 4;
          o.strokeStyle = inp.by === "person" ? "#ea580c" : "#2563eb";
          o.stroke();
        }
      }
    } finally {
      state.current.busy = false;
    }
    if (state.current.want != null) {
      const next = state.current.want;
      state.current.want = null;
      draw(next);
    }
  };

  useEffect(() => {
    if (rec) draw(pos);
  }, [rec, pos]);

  useEffect(() => {
    if (!playing || !rec) return undefined;
    let raf = 0;
    let prev = performance.now();
    const tick = (now) => {
      const dt = (now - prev) * speed;
      prev = now;
      setPos((p) => {
        const n = Math.min(rec.end - rec.start, p + dt);
        if (n >= rec.end - rec.start) setPlaying(false);
        return n;
      });
      raf = requestAnimationFrame(tick);
    };
    raf = requestAnimationFrame(tick);
    return () => cancelAnimationFrame(raf);
  }, [playing, speed, rec]);

  if (error) return html`<p class="error" role="alert">${error}</p>`;
  if (!rec) return html`<p class="muted" role="status">Loading the recording of ${bot}…</p>`;
  const span = Math.max(1, rec.end - rec.start);
  const at = rec.start + pos;
  const feed = events
    .filter((e) => e.at_ms >= rec.start && e.at_ms <= rec.end && (!e.bot || e.bot === bot))
    .map((e) => ({ t: e.at_ms, by: "activity", what: describe(e) }));
  const timeline = rec.inputs.concat(feed).sort((a, b) => a.t - b.t);
  let current = -1;
  timeline.forEach((e, i) => {
    if (e.t <= at) current = i;
  });
  const lastFrame = rec.frames.length ? rec.frames[rec.frames.length - 1].t : rec.start;
  return html`<div class="player" data-start=${rec.start} data-end=${rec.end} data-last-frame=${lastFrame}>
    <div class="player-screen">
      <canvas ref=${canvas} width=${rec.width} height=${rec.height} aria-label=${"Recorded screen of " + bot + " at " + clock(at)}></canvas>
      <canvas class="player-overlay" width=${rec.width} height=${rec.height} aria-hidden="true"></canvas>
    </div>
    <div class="player-controls">
      <button type="button" class="primary" onClick=${() => {
        if (!playing && pos >= span) setPos(0);
        setPlaying(!playing);
      }}>${playing ? "Pause" : "Play"}</button>
      <input type="range" aria-label="Position in the recording" min="0" max=${span} step="50" value=${pos}
        onInput=${(e) => setPos(Number(e.currentTarget.value))} />
      <span class="player-time" role="status">${duration(pos)} / ${duration(span)} · ${clock(at)}</span>
      <label>Speed <select value=${speed} onChange=${(e) => setSpeed(Number(e.currentTarget.value))}>
        ${SPEEDS.map((s) => html`<option value=${s}>${s}×</option>`)}
      </select></label>
    </div>
    <div class="player-marks" aria-hidden="true">
      ${timeline.map((e) => html`<span class=${"mark by-" + e.by} style=${{ left: ((100 * (e.t - rec.start)) / span).toFixed(2) + "%" }}></span>`)}
    </div>
    <ol class="timeline" aria-label=${"Inputs and activity of " + bot}>
      ${timeline.map((e, i) => html`<li key=${i} data-t=${e.t} class=${"by-" + e.by + (i === current ? " current" : "")}>
        <button type="button" class="link" onClick=${() => setPos(Math.max(0, e.t - rec.start))}>
          <time>${clock(e.t)}</time> <span class="who">${e.by === "person" ? "person" : e.by === "agent" ? "agent" : e.by}</span> ${e.what}
        </button>
      </li>`)}
    </ol>
  </div>`;
}

/** The Recordings window of a computer. */
export function Recordings({ computer, visible, events }) {
  const [list, setList] = useState(null);
  const [error, setError] = useState(null);
  const [bot, setBot] = useState(null);
  const [busy, actError, act] = useAction();
  usePoll(
    async (signal) => {
      try {
        const v = await server.get(server.c(computer, "recordings"));
        if (!signal.aborted) {
          setList(v);
          setError(null);
        }
      } catch (e) {
        if (!signal.aborted) setError(messageOf(e));
      }
    },
    LIST_EVERY_MS,
    [computer],
    visible,
  );
  const toggle = (enabled) =>
    act(async () => {
      const s = await server.api("PUT", server.c(computer, "recording"), { enabled });
      setList((l) => Object.assign({}, l, { setting: s }));
    });
  if (error && !list) return html`<p class="error" role="alert">${error}</p>`;
  if (!list) return html`<p class="muted" role="status">Loading recordings…</p>`;
  const s = list.setting;
  return html`<div class="recordings">
    <div class="recording-head">
      <span role="status" class=${"recording-state" + (s.enabled ? " on" : "")}>${s.enabled ? "● Recording this computer's screens" : "Not recording"}</span>
      ${server.can("operator") &&
      html`<button type="button" onClick=${() => toggle(!s.enabled)} disabled=${!!busy}>${s.enabled ? "Stop recording" : "Record screens"}</button>`}
      <span class="muted">kept ${s.retention_hours} h</span>
    </div>
    ${actError && html`<p class="error" role="alert">${actError}</p>`}
    ${list.bots.length === 0
      ? html`<p class="empty">Nothing recorded yet.</p>`
      : html`<ul class="recorded" aria-label="Recorded bots">
          ${list.bots.map((b) => html`<li key=${b.bot} class=${b.bot === bot ? "selected" : ""}>
            <button type="button" class="link" onClick=${() => setBot(b.bot)}>${b.bot}</button>
            <span>${clock(b.started_at_ms)}–${clock(b.ended_at_ms)} · ${duration(b.ended_at_ms - b.started_at_ms)} · ${bytes(b.bytes)}${b.lost ? " · " + b.lost + " records lost" : ""}</span>
          </li>`)}
        </ul>`}
    ${bot && html`<${Player} key=${bot} computer=${computer} bot=${bot} events=${events} version=${(list.bots.find((b) => b.bot === bot) || {}).ended_at_ms} />`}
  </div>`;
}

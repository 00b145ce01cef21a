// Small helpers shared by the console's views: formatting, polling and the clock.
import { useEffect, useRef, useState } from "./lib/preact.js";

/** `n` bytes, human-readable (binary units). */
export function bytes(n) {
  if (n == null || Number.isNaN(n)) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return (i === 0 ? String(v) : v.toFixed(v < 10 ? 1 : 0)) + " " + units[i];
}

/** A duration in ms as `1 h 5 min`, `4 min 10 s` or `12 s`. */
export function duration(ms) {
  if (ms == null) return "–";
  const s = Math.max(0, Math.round(ms / 1000));
  if (s >= 3600) return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
  if (s >= 60) return Math.floor(s / 60) + " min " + (s % 60) + " s";
  return s + " s";
}

/** A wall-clock time (`14:03:27`) of a unix time in ms. */
export function clock(ms) {
  return new Date(ms).toLocaleTimeString([], { hour12: false });
}

/** The current time in ms, re-rendering every `every` ms. */
export function useNow(every = 1000) {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), every);
    return () => clearInterval(t);
  }, [every]);
  return now;
}

/**
 * Runs `fn` now and then every `every` ms (never two at once) while `active`; `deps` restart it.
 * `fn` gets an AbortSignal that fires when the poll stops.
 */
export function usePoll(fn, every, deps, active = true) {
  const ref = useRef(fn);
  ref.current = fn;
  useEffect(() => {
    if (!active) return undefined;
    const ctl = new AbortController();
    let timer = null;
    const tick = async () => {
      try {
        await ref.current(ctl.signal);
      } catch (e) {
        /* the view shows its own errors */
      }
      if (!ctl.signal.aborted) timer = setTimeout(tick, every);
    };
    tick();
    return () => {
      ctl.abort();
      clearTimeout(timer);
    };
  }, [...deps, active, every]);
}

/**
 * A form's or button's action: `[busy, error, act]`. `act(fn, what)` runs `fn` with `busy` set
 * to `what` (true by default) meanwhile, and keeps its failure's message (`describe(e)`, by
 * default the error's own).
 */
export function useAction(describe = messageOf) {
  const [busy, setBusy] = useState(null);
  const [error, setError] = useState(null);
  const act = async (fn, what = true) => {
    setBusy(what);
    setError(null);
    try {
      await fn();
    } catch (e) {
      setError(describe(e));
    } finally {
      setBusy(null);
    }
  };
  return [busy, error, act];
}

/** The last path component of a slash-separated path. */
export function basename(p) {
  const parts = String(p).split("/").filter(Boolean);
  return parts.length ? parts[parts.length - 1] : "";
}

/** The message to show for an error. */
export function messageOf(e) {
  return (e && e.message) || String(e);
}

// A bot's live screen: the viewer capability page (docs/screens.md#live-views) in an iframe, its
// reporter's status watched (postMessage and the page's data-rakazo-status, same origin), and a
// fixed reason with Retry when it fails or stays silent.
import { html, useEffect, useRef, useState } from "./lib/preact.js";
import * as server from "./api.js";
import { messageOf } from "./util.js";

/** How long a screen may stay short of `connected` before it counts as not responding. */
export const SCREEN_TIMEOUT_MS = 15000;
const NO_RESPONSE = "The screen did not respond.";

/**
 * Issues a capability URL for `bot`'s screen or terminal; when the bot has no desktop yet and the
 * session may start one, starts it (`ensure`) and asks again.
 */
export async function capabilityPath(computer, bot, kind) {
  const ask = () =>
    kind === "terminal"
      ? server.post(server.c(computer, "terminals", bot, "url"), {})
      : server.post(server.c(computer, "screens", bot, "url"), { policy: kind });
  try {
    return (await ask()).path;
  } catch (e) {
    if (!server.can("operator") || e.status === 403 || e.status === 401 || e.code === "no_control") throw e;
    await server.post(server.c(computer, "screens", bot, "ensure"), {});
    return (await ask()).path;
  }
}

/**
 * The live screen of `bot` under `policy` (view or control). `onStatus(status)` hears each
 * reported state.
 */
export function Screen({ computer, bot, policy, onStatus }) {
  const [attempt, setAttempt] = useState(0);
  const [path, setPath] = useState(null);
  const [status, setStatus] = useState("loading");
  const [failure, setFailure] = useState(null);
  const frame = useRef(null);
  const report = useRef(onStatus);
  report.current = onStatus;

  useEffect(() => {
    let gone = false;
    let last = null;
    setPath(null);
    setFailure(null);
    setStatus("loading");
    const seen = (s) => {
      if (gone || !s || s === last) return;
      last = s;
      setStatus(s);
      if (report.current) report.current(s);
      if (s === "failed") setFailure(NO_RESPONSE);
      else if (s === "disconnected") setFailure("The screen connection was closed.");
      else if (s === "connected") clearTimeout(timer);
    };
    const onMessage = (e) => {
      const f = frame.current;
      if (f && e.source === f.contentWindow && e.data && e.data.type === "rakazo.live") seen(e.data.status);
    };
    addEventListener("message", onMessage);
    // The page keeps its state on its <html> too: read it, in case a message came before we listened.
    const poll = setInterval(() => {
      try {
        const doc = frame.current && frame.current.contentDocument;
        const s = doc && doc.documentElement && doc.documentElement.getAttribute("data-rakazo-status");
        if (s) seen(s);
      } catch (e) {
        /* not loaded yet */
      }
    }, 250);
    const timer = setTimeout(() => {
      if (last !== "connected") {
        setFailure(NO_RESPONSE);
        if (report.current) report.current("failed");
      }
    }, SCREEN_TIMEOUT_MS);
    capabilityPath(computer, bot, policy)
      .then((p) => !gone && setPath(p))
      .catch((e) => {
        if (gone) return;
        clearTimeout(timer);
        setFailure(e.code === "bot_running" || e.status === 409 || e.status === 403 ? messageOf(e) : NO_RESPONSE + " " + messageOf(e));
      });
    return () => {
      gone = true;
      clearTimeout(timer);
      clearInterval(poll);
      removeEventListener("message", onMessage);
    };
  }, [computer, bot, policy, attempt]);

  const label = `${policy === "control" ? "Controlling" : "Watching"} the screen of ${bot}`;
  return html`<div class=${"screen " + (policy === "control" ? "controlled" : "watched")} data-status=${failure ? "failed" : status}>
    ${path && !failure && html`<iframe key=${path} ref=${frame} class="screen-frame" title=${label} src=${path} data-bot=${bot} data-policy=${policy} referrerpolicy="no-referrer"></iframe>`}
    ${!failure && status !== "connected" && html`<p class="screen-status" role="status">${status === "loading" ? "Opening the screen…" : status === "connecting" ? "Connecting…" : status}</p>`}
    ${failure && html`<div class="screen-failed" role="alert">
      <p>${failure}</p>
      <button type="button" class="primary" onClick=${() => setAttempt((a) => a + 1)}>Retry</button>
    </div>`}
  </div>`;
}

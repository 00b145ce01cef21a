// The live screen viewer: noVNC (Debian's files, served from disk) on this capability's websocket.
import RFB from "/assets/novnc/core/rfb.js";

const report = window.rakazoReport;
const policy = document.documentElement.dataset.policy;
const wsUrl =
  (location.protocol === "https:" ? "wss://" : "ws://") +
  location.host +
  location.pathname.replace(/\/+$/, "") +
  "/ws";

let connected = false;
report("connecting");
const rfb = new RFB(document.getElementById("screen"), wsUrl, { shared: true });
// The guest enforces view-only whatever the page does; this only keeps the UI honest.
rfb.viewOnly = policy !== "control";
rfb.scaleViewport = true;
rfb.resizeSession = false;
rfb.addEventListener("connect", () => {
  connected = true;
  report("connected");
});
rfb.addEventListener("disconnect", () => report(connected ? "disconnected" : "failed"));
rfb.addEventListener("securityfailure", () => report("failed"));

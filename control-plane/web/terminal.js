// The live terminal: xterm.js on this capability's websocket, speaking the frames of
// docs/screens.md#terminal-frames: [kind u8][len u32 big-endian][payload]; kind 0 = input,
// kind 1 = resize.
//
// A dropped connection reconnects by itself (docs/screens.md#reconnecting): the page has its own
// random session id, sent as `?session=`, and a reconnect adds `&resume=1`, so the computer gives
// this page its shell back, its screen redrawn, or (the shell is gone) a fresh shell that says
// so. Retries back off from 0.5 s to 8 s, for up to 2 minutes, each after checking that the
// page's own URL still opens; a close by policy (the link revoked or expired, control released)
// or a URL that no longer opens (403, 404) ends them.
(function () {
  "use strict";
  var report = window.rakazoReport;
  var base =
    (location.protocol === "https:" ? "wss://" : "ws://") +
    location.host +
    location.pathname.replace(/\/+$/, "") +
    "/ws";
  // In memory only: a reload is a new page with a new shell, and two tabs never share one.
  var session = (function () {
    var bytes = new Uint8Array(16);
    window.crypto.getRandomValues(bytes);
    var hex = "";
    for (var i = 0; i < bytes.length; i++) hex += (bytes[i] + 256).toString(16).slice(1);
    return hex;
  })();
  var term = new Terminal({ cursorBlink: true, scrollback: 5000, convertEol: false });
  var fit = new FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open(document.getElementById("terminal"));
  var encoder = new TextEncoder();

  function frame(kind, payload) {
    var out = new Uint8Array(5 + payload.length);
    var view = new DataView(out.buffer);
    view.setUint8(0, kind);
    view.setUint32(1, payload.length, false);
    out.set(payload, 5);
    return out;
  }
  function send(kind, payload) {
    if (ws && ws.readyState === WebSocket.OPEN) ws.send(frame(kind, payload));
  }
  function sendResize() {
    var p = new Uint8Array(4);
    var v = new DataView(p.buffer);
    v.setUint16(0, term.cols, false);
    v.setUint16(2, term.rows, false);
    send(1, p);
  }
  function showStatus(text) {
    var el = document.getElementById("status");
    if (el) el.textContent = text;
  }

  var POLICY_CLOSE = 1008; // the control plane's close for a revoked or expired link
  var FIRST_DELAY_MS = 500;
  var MAX_DELAY_MS = 8000;
  var GIVE_UP_MS = 120000;
  var ws = null;
  var everConnected = false;
  var attempt = 0;
  var downSince = 0;
  function closed(why) {
    report("disconnected");
    term.write("\r\n[terminal closed: " + why + "]\r\n");
  }
  function connect(resume) {
    if (!resume) report("connecting");
    var opened = false;
    ws = new WebSocket(base + "?session=" + session + (resume ? "&resume=1" : ""));
    ws.binaryType = "arraybuffer";
    ws.onopen = function () {
      opened = true;
      everConnected = true;
      attempt = 0;
      downSince = 0;
      report("connected");
      // The size first: the computer redraws the screen for it.
      fit.fit();
      sendResize();
      term.focus();
    };
    ws.onmessage = function (e) {
      term.write(new Uint8Array(e.data));
    };
    ws.onclose = function (e) {
      if (e.code === POLICY_CLOSE) {
        closed(e.reason || "revoked");
        return;
      }
      if (!everConnected) {
        report("failed");
        term.write("\r\n[cannot connect: the terminal link may have been revoked]\r\n");
        return;
      }
      if (opened) report("disconnected");
      retryLater();
    };
  }
  // After a drop: waits, asks whether the link still opens (a refused websocket does not say
  // why), and reconnects if it does.
  function retryLater() {
    if (!downSince) downSince = Date.now();
    if (Date.now() - downSince > GIVE_UP_MS) {
      report("disconnected");
      term.write("\r\n[connection lost; reload the page for a new shell]\r\n");
      return;
    }
    var delay = Math.min(FIRST_DELAY_MS * Math.pow(2, attempt), MAX_DELAY_MS);
    attempt += 1;
    report("reconnecting");
    showStatus("reconnecting\u2026");
    setTimeout(function () {
      fetch(location.href, { cache: "no-store", credentials: "omit" }).then(function (r) {
        if (r.status === 403 || r.status === 404) {
          closed("the link was revoked or has expired");
          return;
        }
        connect(true);
      }, retryLater);
    }, delay);
  }
  connect(false);
  term.onData(function (d) {
    send(0, encoder.encode(d));
  });
  term.onBinary(function (d) {
    var p = new Uint8Array(d.length);
    for (var i = 0; i < d.length; i++) p[i] = d.charCodeAt(i) & 0xff;
    send(0, p);
  });
  term.onResize(sendResize);
  window.addEventListener("resize", function () {
    fit.fit();
  });
  fit.fit();
})();

// The live terminal: xterm.js on this capability's websocket, speaking the frames of
// docs/screens.md#terminal-frames: [kind u8][len u32 big-endian][payload]; kind 0 = input,
// kind 1 = resize.
(function () {
  "use strict";
  var report = window.rakazoReport;
  var wsUrl =
    (location.protocol === "https:" ? "wss://" : "ws://") +
    location.host +
    location.pathname.replace(/\/+$/, "") +
    "/ws";
  var term = new Terminal({ cursorBlink: true, scrollback: 5000, convertEol: false });
  var fit = new FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open(document.getElementById("terminal"));
  var encoder = new TextEncoder();
  var connected = false;

  function frame(kind, payload) {
    var out = new Uint8Array(5 + payload.length);
    var view = new DataView(out.buffer);
    view.setUint8(0, kind);
    view.setUint32(1, payload.length, false);
    out.set(payload, 5);
    return out;
  }
  function send(kind, payload) {
    if (ws.readyState === WebSocket.OPEN) ws.send(frame(kind, payload));
  }
  function sendResize() {
    var p = new Uint8Array(4);
    var v = new DataView(p.buffer);
    v.setUint16(0, term.cols, false);
    v.setUint16(2, term.rows, false);
    send(1, p);
  }

  // A dropped connection reconnects to a fresh shell (docs/screens.md#terminal). A websocket
  // that never opens (revoked or expired capability, control released) ends the retries.
  var ws = null;
  var retries = 0;
  var MAX_RETRIES = 5;
  function connect() {
    report("connecting");
    connected = false;
    ws = new WebSocket(wsUrl);
    ws.binaryType = "arraybuffer";
    ws.onopen = function () {
      connected = true;
      retries = 0;
      report("connected");
      fit.fit();
      sendResize();
      term.focus();
    };
    ws.onmessage = function (e) {
      term.write(new Uint8Array(e.data));
    };
    ws.onclose = function () {
      if (!connected) {
        report("failed");
        term.write("\r\n[cannot connect: the terminal link may have been revoked]\r\n");
        return;
      }
      report("disconnected");
      if (retries >= MAX_RETRIES) {
        term.write("\r\n[connection closed]\r\n");
        return;
      }
      retries += 1;
      term.write("\r\n[connection closed; opening a new shell]\r\n");
      setTimeout(connect, 1000);
    };
  }
  connect();
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

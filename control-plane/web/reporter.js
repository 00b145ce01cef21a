// The page reporter (docs/screens.md#live-views): tells the embedding app how the live
// connection goes, with `loading`, `connecting`, `connected`, `failed`, `disconnected` and (a
// terminal finding its shell again) `reconnecting`, and
// keeps every state on the page (data-rakazo-status, window.rakazoStatus) for whoever inspects
// it. It also removes VideoDecoder before noVNC loads, so noVNC never picks the WebCodecs path.
(function () {
  "use strict";
  try {
    delete window.VideoDecoder;
  } catch (e) {
    /* not configurable: leave it */
  }
  if ("VideoDecoder" in window) {
    try {
      Object.defineProperty(window, "VideoDecoder", { value: undefined, configurable: true });
    } catch (e) {
      /* nothing more to do */
    }
  }
  var history = [];
  window.rakazoStatus = history;
  window.rakazoReport = function (status) {
    history.push(status);
    document.documentElement.setAttribute("data-rakazo-status", status);
    var el = document.getElementById("status");
    if (el) el.textContent = status;
    if (window.parent && window.parent !== window) {
      // Only the state crosses to the embedder: never the URL (it is the credential).
      window.parent.postMessage({ type: "rakazo.live", status: status }, "*");
    }
  };
  window.addEventListener("error", function () {
    if (history.indexOf("connected") < 0) window.rakazoReport("failed");
  });
  window.rakazoReport("loading");
})();

// Homework's small page helpers. Live parts use htmx and its SSE extension;
// this file only formats times relative to now (with the exact time kept in
// the element's title) and opens <dialog>s from buttons with
// data-open-dialog="ID" (the CSP allows no inline handlers); the composer's
// agent preset fills in the agent command.
(function () {
  "use strict";
  function rel(t) {
    var s = Math.round((Date.now() - t.getTime()) / 1000);
    var fut = s < 0;
    s = Math.abs(s);
    var out;
    if (s < 45) out = "just now";
    else if (s < 90) out = "a minute";
    else if (s < 3600) out = Math.round(s / 60) + " minutes";
    else if (s < 5400) out = "an hour";
    else if (s < 86400) out = Math.round(s / 3600) + " hours";
    else out = Math.round(s / 86400) + " days";
    if (out === "just now") return out;
    return fut ? "in " + out : out + " ago";
  }
  function update(root) {
    (root || document).querySelectorAll("time[datetime]").forEach(function (el) {
      var t = new Date(el.getAttribute("datetime"));
      if (isNaN(t)) return;
      if (!el.title) el.title = t.toLocaleString();
      el.textContent = rel(t);
    });
  }
  document.addEventListener("DOMContentLoaded", function () { update(); });
  document.addEventListener("htmx:afterSwap", function (e) { update(e.target); });
  setInterval(update, 30000);
  // Event streams. The SSE extension opens them through
  // htmx.createEventSource; keep them so that leaving the page closes them.
  // Otherwise the back/forward cache keeps a left page, and its streams,
  // alive, and a few pages later the browser's six connections per host are
  // all held by streams and the next page waits.
  var sources = [];
  if (window.htmx) {
    htmx.createEventSource = function (url) {
      sources = sources.filter(function (s) { return s.readyState !== 2; });
      var es = new EventSource(url, { withCredentials: true });
      sources.push(es);
      return es;
    };
  }
  window.addEventListener("pagehide", function () {
    sources.forEach(function (s) { s.close(); });
    sources = [];
  });
  // A page restored from that cache has no streams: load it afresh.
  window.addEventListener("pageshow", function (e) {
    if (e.persisted && document.querySelector("[sse-connect]")) location.reload();
  });
  // The composer's agent CLI preset fills in the command and output format
  // (which stay editable).
  document.addEventListener("change", function (e) {
    if (!e.target || e.target.id !== "agent_preset") return;
    var o = e.target.options[e.target.selectedIndex];
    var argv = document.getElementById("agent_argv");
    var fmt = document.getElementById("agent_output_format");
    if (argv && o.getAttribute("data-argv")) argv.value = o.getAttribute("data-argv");
    if (fmt && o.getAttribute("data-format")) fmt.value = o.getAttribute("data-format");
  });
  document.addEventListener("click", function (e) {
    var b = e.target.closest ? e.target.closest("[data-open-dialog]") : null;
    if (!b) return;
    var d = document.getElementById(b.getAttribute("data-open-dialog"));
    if (d && typeof d.showModal === "function" && !d.open) d.showModal();
  });
})();

// Homework's small page helpers. Live parts use htmx and its SSE extension;
// this file only formats times relative to now, with the exact time kept
// in the element's title.
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
})();

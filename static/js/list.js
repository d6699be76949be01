// list.js: the run list's bulk selection. The list works without it (the
// server asks to confirm on a page of its own); with it, a select-all box,
// a live count, ticks kept across the list's live updates, and one
// confirmation in a dialog before the single POST.
(function () {
  "use strict";
  var picked = new Set(); // run ids ticked, kept across live swaps

  function boxes() {
    return Array.prototype.slice.call(document.querySelectorAll("input.run-select"));
  }

  function checked() {
    return boxes().filter(function (b) { return b.checked; });
  }

  function update() {
    var all = boxes(), n = checked().length, count = document.getElementById("bulk-count");
    if (count) count.textContent = n === 0 ? "Tick runs to cancel or continue several at once." : n + (n === 1 ? " run selected" : " runs selected");
    var sa = document.getElementById("select-all");
    if (sa) {
      sa.hidden = all.length === 0;
      sa.checked = all.length > 0 && n === all.length;
      sa.indeterminate = n > 0 && n < all.length;
    }
  }

  // After a live update the rows are new elements: tick again the ones
  // still listed.
  function restore() {
    boxes().forEach(function (b) { b.checked = picked.has(b.value); });
    update();
  }

  document.addEventListener("change", function (e) {
    var t = e.target;
    if (t.id === "select-all") {
      boxes().forEach(function (b) {
        b.checked = t.checked;
        if (t.checked) picked.add(b.value); else picked.delete(b.value);
      });
      update();
    } else if (t.classList && t.classList.contains("run-select")) {
      if (t.checked) picked.add(t.value); else picked.delete(t.value);
      update();
    }
  });

  // An outerHTML swap settles on the new #runs or the old, detached one
  // depending on the htmx version; restoring is cheap, so do it after any.
  document.addEventListener("htmx:afterSettle", function () {
    if (document.getElementById("runs")) restore();
  });

  var pending = null; // the action the dialog asks about

  document.addEventListener("submit", function (e) {
    var form = e.target;
    if (!form || form.id !== "bulk" || form.dataset.confirmed === "1") return;
    var dialog = document.getElementById("bulk-dialog");
    var n = checked().length;
    if (!dialog || typeof dialog.showModal !== "function" || n === 0) return; // the server answers
    e.preventDefault();
    pending = e.submitter ? e.submitter.value : "cancel";
    var runs = n === 1 ? "1 run" : n + " runs";
    document.getElementById("bulk-question").textContent = pending === "continue" ?
      "Continue " + runs + " with the budgets entered?" :
      "Cancel " + runs + "? Each is stopped at once; the work so far is kept.";
    document.getElementById("bulk-yes").textContent = (pending === "continue" ? "Yes, continue " : "Yes, cancel ") + runs;
    dialog.showModal();
  });

  document.addEventListener("click", function (e) {
    var t = e.target, dialog = document.getElementById("bulk-dialog"), form = document.getElementById("bulk");
    if (!dialog || !form || !t) return;
    if (t.id === "bulk-no") {
      dialog.close();
    } else if (t.id === "bulk-yes" && pending) {
      [["action", pending], ["confirm", "1"]].forEach(function (kv) {
        var input = document.createElement("input");
        input.type = "hidden";
        input.name = kv[0];
        input.value = kv[1];
        input.setAttribute("data-confirmed-input", "");
        form.appendChild(input);
      });
      form.dataset.confirmed = "1";
      dialog.close();
      form.submit();
    }
  });

  // Back from the answer, a page restored from the back-forward cache asks
  // again before the next bulk action.
  window.addEventListener("pageshow", function () {
    var form = document.getElementById("bulk");
    if (!form) return;
    delete form.dataset.confirmed;
    form.querySelectorAll("[data-confirmed-input]").forEach(function (i) { i.remove(); });
    pending = null;
  });

  // Folded filters open by themselves where there is room for them.
  function openWide() {
    if (!window.matchMedia || !window.matchMedia("(min-width: 641px)").matches) return;
    document.querySelectorAll("details[data-open-wide]").forEach(function (d) { d.open = true; });
  }

  document.addEventListener("DOMContentLoaded", function () {
    openWide();
    boxes().forEach(function (b) { if (b.checked) picked.add(b.value); });
    update();
  });
})();

// Homework's small page helpers. Live parts use htmx and its SSE extension;
// this file formats times relative to now (with the exact time kept in the
// element's title; a <time class="abs"> keeps its clock time), opens
// <dialog>s from buttons with data-open-dialog="ID" (the CSP allows no
// inline handlers), and schedules the run page's live fetches (htmx does the
// swapping); the composer's agent preset fills in the agent command.
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
    (root || document).querySelectorAll("time[datetime]:not(.abs)").forEach(function (el) {
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
  // Every event of the stream is also relayed as a "hw:event" on document
  // (detail: the event as the API sends it), so that the run page updates
  // from the one stream the tab already holds (the dashboard feed).
  var eventTypes = window.homeworkEventTypes || []; // static/js/events.gen.js
  function relay(e) {
    var ev;
    try { ev = JSON.parse(e.data); } catch (err) { return; }
    if (!ev || !ev.type) return;
    document.dispatchEvent(new CustomEvent("hw:event", { detail: ev }));
  }
  // The dashboard feed is shared by every tab of the site: one tab, the
  // leader, holds the EventSource and passes each event to the others over
  // a BroadcastChannel, so six open run pages hold one stream between them,
  // not six (browsers allow six connections per host on HTTP/1.1). When the
  // leader goes, another tab takes over and opens the stream from the last
  // event it saw. The feed's ids are global event ids, so duplicates are
  // dropped by id. The leader is the holder of a Web Lock where the browser
  // has Web Locks (https and localhost only); on plain http it is elected
  // over the channel itself (electLeader). Without BroadcastChannel each
  // tab holds its own stream. The tab's role is kept in <html data-feed>.
  function sharedSource(url) {
    var shim = new EventTarget();
    var m = /[?&]since_id=(\d+)/.exec(url);
    var last = m ? parseInt(m[1], 10) : 0;
    var base = url.replace(/[?&]since_id=\d+/, "");
    var ch = new BroadcastChannel("homework-feed");
    var es = null, closed = false, release = null, onControl = null, onClose = null;
    shim.readyState = 1;
    function deliver(type, data, id) {
      var n = parseInt(id, 10);
      if (n && n <= last) return;
      if (n) last = n;
      shim.dispatchEvent(new MessageEvent(type, { data: data, lastEventId: id }));
    }
    ch.onmessage = function (e) {
      var msg = e.data;
      if (msg && msg.hw) { if (onControl) onControl(msg); return; }
      if (msg && msg.type) {
        if (onControl) onControl({ hw: "event" });
        deliver(msg.type, msg.data, msg.id);
      }
    };
    function openStream() {
      if (closed || es) return;
      var mine = new EventSource(base + (base.indexOf("?") < 0 ? "?" : "&") + "since_id=" + last, { withCredentials: true });
      es = mine;
      eventTypes.forEach(function (t) {
        mine.addEventListener(t, function (e) {
          if (es !== mine) return;
          ch.postMessage({ type: t, data: e.data, id: e.lastEventId });
          deliver(t, e.data, e.lastEventId);
        });
      });
      mine.onerror = function () {
        // A stream the server ended (or refused) is reopened from the
        // last event seen; the browser retries the others itself.
        if (mine.readyState === 2 && es === mine && !closed) {
          setTimeout(function () { if (es === mine) { es = null; openStream(); } }, 2000);
        }
      };
    }
    function closeStream() {
      if (es) es.close();
      es = null;
    }
    function role(r) { document.documentElement.setAttribute("data-feed", r); }
    if (navigator.locks) {
      var lead = function () {
        return new Promise(function (resolve) {
          release = resolve;
          if (closed) return resolve();
          role("leader");
          openStream();
        });
      };
      navigator.locks.request("homework-feed", { ifAvailable: true }, function (lock) {
        if (lock) return lead();
        // Another tab holds the stream. Events it passed on before this tab
        // listened are not replayed: fetch the live parts once, then wait to
        // take over the stream if that tab goes.
        role("follower");
        document.dispatchEvent(new CustomEvent("hw:reconnect"));
        navigator.locks.request("homework-feed", lead);
      });
    } else {
      electLeader(ch, role, openStream, closeStream, function (c, cl) { onControl = c; onClose = cl; });
    }
    shim.close = function () {
      closed = true;
      shim.readyState = 2;
      if (onClose) onClose();
      ch.close();
      closeStream();
      if (release) release();
    };
    return shim;
  }
  // electLeader elects the feed's leader over the channel, for browsers
  // without Web Locks. The leader says so ("hb") every second from its
  // timer, and at once to a tab that asks or claims while its timer runs.
  // A tab that has heard no leader for a lease claims the lead, and of the
  // tabs that claim within a short window the one with the smallest id
  // takes it. A leader that closes says "bye" and the others claim at once;
  // one that froze (its timer stopped) is replaced after the lease, and
  // steps down, closing its stream, as soon as it hears the newer leader.
  // Two leaders that hear each other keep the newer term, so there is one
  // stream again within a heartbeat.
  function electLeader(ch, role, openStream, closeStream, hooks) {
    var HEARTBEAT = 1000, LEASE = 5000, FIRST = 1500, WINDOW = 300;
    var me = Math.random().toString(36).slice(2) + "." + Date.now().toString(36);
    var term = 0;       // > 0 while this tab leads: when it took the lead
    var sent = 0;       // when this tab, leading, last said so
    var ticked = Date.now(); // when this tab's timer last ran
    var heard = 0;      // when a leader last spoke
    var claims = null;  // the tabs claiming with this one, while it claims
    var followed = false;
    var started = Date.now();
    function send(kind) {
      if (kind === "hb") sent = Date.now();
      ch.postMessage({ hw: kind, tab: me, term: term });
    }
    function newer(t1, id1, t2, id2) { return t1 > t2 || (t1 === t2 && id1 > id2); }
    function follow() {
      heard = Date.now();
      if (!followed) {
        // Events the leader passed on before this tab listened are not
        // replayed: fetch the live parts once.
        followed = true;
        role("follower");
        document.dispatchEvent(new CustomEvent("hw:reconnect"));
      }
    }
    function resign() {
      term = 0;
      closeStream();
      followed = false;
      follow();
    }
    // claim claims the lead; why (start, bye, lease) is kept in
    // <html data-feed-by> when the claim wins.
    function claim(why) {
      claims = [me];
      send("claim");
      setTimeout(function () {
        var c = claims;
        claims = null;
        if (!c || term) return; // a leader spoke up meanwhile
        c.sort();
        if (c[0] !== me) { heard = Date.now(); return; } // wait for the winner
        term = Date.now();
        followed = false;
        document.documentElement.setAttribute("data-feed-by", why);
        role("leader");
        send("hb");
        openStream();
      }, WINDOW);
    }
    // A leader answers a claim only while its own timer runs: a frozen tab
    // (its timers stopped, as the browser does to some background tabs)
    // may still be handed messages, but it no longer passes events on.
    function alive() { return Date.now() - ticked < LEASE; }
    function tick() {
      var now = Date.now();
      ticked = now;
      if (term) {
        if (now - sent >= HEARTBEAT) send("hb");
        return;
      }
      if (claims) return;
      if (heard ? now - heard >= LEASE : now - started >= FIRST) claim(heard ? "lease" : "start");
    }
    hooks(function (msg) {
      switch (msg.hw) {
        case "event": // the leader passing an event on is alive
          if (!term) { follow(); claims = null; }
          break;
        case "hb":
          if (!term) { follow(); claims = null; }
          else if (newer(msg.term, msg.tab, term, me)) resign();
          else if (alive()) send("hb");
          break;
        case "ask":
        case "claim":
          if (term) { if (alive()) send("hb"); }
          else if (claims && msg.hw === "claim") claims.push(msg.tab);
          break;
        case "bye": // the leader closed: claim at once
          if (!term && !claims) { heard = 0; claim("bye"); }
          break;
      }
    }, function () {
      clearInterval(timer);
      if (term) { term = 0; send("bye"); }
    });
    role("electing");
    var timer = setInterval(tick, HEARTBEAT / 4);
    send("ask");
  }
  var canShare = typeof BroadcastChannel === "function" && typeof EventTarget === "function";
  if (window.htmx) {
    htmx.createEventSource = function (url) {
      sources = sources.filter(function (s) { return s.readyState !== 2; });
      var es = canShare && url.indexOf("/api/events") === 0 ? sharedSource(url) : new EventSource(url, { withCredentials: true });
      eventTypes.forEach(function (t) { es.addEventListener(t, relay); });
      var opened = false;
      es.addEventListener("open", function () {
        // After a reconnect the stream replays from its cursor, but a part
        // fetched meanwhile may have raced it: fetch every part again.
        if (opened) document.dispatchEvent(new CustomEvent("hw:reconnect"));
        opened = true;
      });
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
    if (d && typeof d.showModal === "function" && !d.open) {
      d.showModal();
      d.querySelectorAll("[data-live-src]").forEach(refresh);
    }
  });

  // ---- The run page ----
  // Parts with data-live-src are fetched again (into themselves) after the
  // events named in data-live-on. At most one request per part is in flight;
  // events arriving meanwhile mark it dirty and it is fetched once more when
  // the request ends, so the last event is never dropped and the page
  // converges to the server's state. A part with data-live-when-open is
  // fetched only while that dialog is open.
  function state(el) { return el._hw || (el._hw = {}); }
  function refresh(el) {
    var st = state(el);
    if (st.inflight) { st.dirty = true; return; }
    var only = el.getAttribute("data-live-when-open");
    if (only) {
      var dlg = document.getElementById(only);
      if (!dlg || !dlg.open) return;
    }
    st.inflight = true;
    st.dirty = false;
    // Opened logs inside the part outlive its refresh: the fresh copy only
    // lends them its summary (their line count).
    var kept = [];
    el.querySelectorAll("details.log").forEach(function (d) { if (state(d).loaded) kept.push(d); });
    // So do the events the person opened in the live view.
    var opened = [];
    el.querySelectorAll("li[data-seq] > details.event[open]").forEach(function (d) { opened.push(d.parentNode.getAttribute("data-seq")); });
    var done = function () {
      st.inflight = false;
      opened.forEach(function (seq) {
        var d = el.querySelector('li[data-seq="' + seq + '"] > details.event');
        if (d) d.open = true;
      });
      kept.forEach(function (old) {
        var fresh = document.getElementById(old.id);
        if (!fresh || fresh === old) return;
        var s = fresh.querySelector("summary"), os = old.querySelector("summary");
        if (s && os) os.replaceWith(s);
        fresh.replaceWith(old);
      });
      if (st.dirty) setTimeout(function () { refresh(el); }, 100);
    };
    var src = el.getAttribute("data-live-src"), swap = "innerHTML";
    var tail = el.getAttribute("data-live-tail");
    if (tail) {
      // An append-only list: fetch from its last item on; the server sends
      // that item out of band (it may have changed) and appends the rest.
      var items = el.querySelectorAll(tail);
      if (items.length) {
        src += (src.indexOf("?") < 0 ? "?" : "&") + "from=" + items[items.length - 1].getAttribute("data-iteration");
        swap = "beforeend";
      }
    }
    htmx.ajax("GET", src, { source: el, target: el, swap: swap }).then(done, done);
  }
  // An iteration's log (details.log) loads when opened and then appends
  // the blocks after its last one whenever the iteration's transcript grows.
  // Each batch numbers its lines on from the page's last (?line=); a block
  // whose output ended mid-line (data-reopen) is fetched again with what
  // follows, so a progress line redrawn with carriage returns ends up as
  // one line, as on a terminal, and its lines keep their numbers.
  function lastWith(box, attr) {
    for (var l = box.lastElementChild; l; l = l.previousElementSibling) {
      if (l.hasAttribute(attr)) return l;
    }
    return null;
  }
  function running(d) {
    var li = d.closest("li[data-iteration]");
    return !!li && li.classList.contains("running");
  }
  function atBottom(box) { return box.scrollHeight - box.scrollTop - box.clientHeight < 8; }
  // Consecutive blocks of one output stream show one head.
  function joinHeads(el) {
    for (; el; el = el.nextElementSibling) {
      var prev = el.previousElementSibling, key = el.getAttribute("data-key");
      if (prev && key && key.indexOf("output:") === 0 && prev.getAttribute("data-key") === key) el.classList.add("cont");
    }
  }
  function loadLog(d) {
    var st = state(d);
    if (st.inflight) { st.dirty = true; return; }
    var box = d.querySelector(".log-lines");
    if (!box) return;
    if (!st.loaded) {
      st.loaded = true;
      // A running iteration's log follows its live end; a finished one
      // opens at its start.
      st.follow = running(d) && !st.target;
    }
    st.inflight = true;
    st.dirty = false;
    var seqEl = lastWith(box, "data-seq"), lineEl = lastWith(box, "data-next");
    var after = seqEl ? seqEl.getAttribute("data-seq") : "0";
    var line = lineEl ? lineEl.getAttribute("data-next") : "0";
    var last = box.lastElementChild;
    var open = last && last.hasAttribute("data-reopen") ? last : null;
    if (open) { after = open.getAttribute("data-reopen"); line = open.getAttribute("data-from"); }
    var done = function () {
      st.inflight = false;
      var added = last ? last.nextElementSibling : box.firstElementChild;
      if (added && open) open.remove(); // its fresh copy came with the batch
      var more = box.querySelector(".log-more");
      if (more) { more.remove(); st.dirty = true; if (added === more) added = null; }
      if (added) {
        joinHeads(added);
        if (st.follow) box.scrollTop = box.scrollHeight;
        else if (running(d)) d.querySelector(".jump-live").hidden = false;
      }
      if (st.target) showTarget(d);
      if (st.dirty) loadLog(d);
    };
    htmx.ajax("GET", d.getAttribute("data-log-src") + "?after=" + after + "&line=" + line, { source: box, target: box, swap: "beforeend" }).then(done, done);
  }
  document.addEventListener("toggle", function (e) {
    var d = e.target;
    if (d && d.matches && d.matches("details.log") && d.open && !state(d).loaded) loadLog(d);
  }, true);
  // Follow live: a log that the person scrolls up stops following its live
  // end and offers "Jump to live"; scrolled back to the end it follows again.
  document.addEventListener("scroll", function (e) {
    var box = e.target;
    if (!box.classList || !box.classList.contains("log-lines")) return;
    var d = box.closest("details.log");
    if (!d) return;
    var st = state(d);
    st.follow = atBottom(box);
    if (st.follow) d.querySelector(".jump-live").hidden = true;
  }, true);
  document.addEventListener("click", function (e) {
    var b = e.target.closest ? e.target.closest(".jump-live") : null;
    if (!b) return;
    var d = b.closest("details.log"), box = d.querySelector(".log-lines");
    state(d).follow = true;
    box.scrollTop = box.scrollHeight;
    b.hidden = true;
  });
  // Permalinks: #i{n}-L{k} is line k of iteration n's log, #i{n}-L{a}-L{b}
  // lines a to b. Opening one expands the iteration (loading earlier rows
  // of the timeline if need be), scrolls to the line and highlights it;
  // clicking a line number puts its link in the address bar (with Shift,
  // the range from the line linked before).
  var lineHash = /^#i(\d+)-L(\d+)(?:-L(\d+))?$/;
  function lineTarget() {
    var m = lineHash.exec(location.hash);
    if (!m) return null;
    var a = parseInt(m[2], 10), b = m[3] ? parseInt(m[3], 10) : a;
    return { it: m[1], a: Math.min(a, b), b: Math.max(a, b) };
  }
  function highlight(t) {
    document.querySelectorAll(".ll.hl").forEach(function (el) { el.classList.remove("hl"); });
    if (!t) return null;
    var first = null;
    for (var k = t.a; k <= t.b && k - t.a < 10000; k++) {
      var el = document.getElementById("i" + t.it + "-L" + k);
      if (!el) break;
      el.classList.add("hl");
      if (!first) first = el;
    }
    return first;
  }
  function showTarget(d) {
    var st = state(d);
    var first = st.target && st.target.seq ? landHit(d, st.target) : highlight(st.target);
    if (first) {
      st.target = null;
      st.follow = false;
      first.scrollIntoView({ block: "center" });
    } else if (!st.dirty) {
      st.target = null; // the whole log is here and has no such line
    }
  }
  var earlier = 0;
  function openTarget() {
    var t = lineTarget();
    if (!t || !document.getElementById("run-page")) return;
    var d = document.getElementById("log-" + t.it);
    if (!d) {
      // The row is before the ones shown: load earlier rows until it is.
      var more = document.querySelector("#show-earlier button");
      if (more && earlier++ < 500) more.click();
      return;
    }
    var st = state(d);
    st.target = t;
    st.follow = false;
    if (!d.open) d.open = true; // its toggle loads it
    else if (!st.loaded) loadLog(d);
    else if (!st.inflight) showTarget(d);
  }
  document.addEventListener("DOMContentLoaded", openTarget);
  window.addEventListener("hashchange", openTarget);
  document.addEventListener("htmx:afterSettle", function (e) {
    if (e.target && e.target.id === "timeline-earlier" && lineTarget() && !pendingHit) openTarget();
  });
  document.addEventListener("click", function (e) {
    var a = e.target.closest ? e.target.closest("a.ln") : null;
    if (!a || e.ctrlKey || e.metaKey || e.altKey || e.button !== 0) return;
    e.preventDefault();
    var id = a.parentNode.id, m = /^i(\d+)-L(\d+)$/.exec(id);
    if (!m) return;
    var cur = lineTarget(), hash = "#" + id;
    if (e.shiftKey && cur && cur.it === m[1]) hash = "#i" + m[1] + "-L" + cur.a + "-L" + m[2];
    history.replaceState(null, "", hash);
    highlight(lineTarget());
    var d = a.closest("details.log");
    if (d) state(d).follow = false;
  });
  var statusTypes = " run_started run_continued run_recovered run_waiting_on_user user_response run_stalled run_stopped run_completed run_canceled run_failed ";
  function livePage(ev) {
    var page = document.getElementById("run-page");
    return page && page.getAttribute("data-run-id") === ev.run_id ? page : null;
  }
  document.addEventListener("hw:event", function (e) {
    var ev = e.detail;
    var page = livePage(ev);
    if (!page) return;
    if (ev.type === homeworkEvent.Transcript) {
      var d = document.getElementById("log-" + (ev.data && ev.data.iteration));
      if (d && state(d).loaded) loadLog(d);
      return;
    }
    if (statusTypes.indexOf(" " + ev.type + " ") >= 0) {
      // Banners about an earlier action ("Answer sent") are stale now.
      document.querySelectorAll(".ok-box").forEach(function (b) { b.remove(); });
    }
    page.querySelectorAll("[data-live-on]").forEach(function (el) {
      var on = " " + el.getAttribute("data-live-on") + " ";
      if (on === " * " || on.indexOf(" " + ev.type + " ") >= 0) refresh(el);
    });
  });
  document.addEventListener("hw:reconnect", function () {
    var page = document.getElementById("run-page");
    if (page) page.querySelectorAll("[data-live-src]").forEach(refresh);
  });
  // Search hits (#log-hits, one per transcript record that matches): a
  // hit clicked, or reached with Next and Previous (which cycle, "k of N"
  // between them), opens its iteration's log (loading earlier timeline rows
  // until the iteration is there, and the log's pages until the record is),
  // scrolls its line into view, highlights it and marks the match in it.
  var hitAt = -1, pendingHit = null, hitEarlier = 0;
  function hitItems() { return Array.prototype.slice.call(document.querySelectorAll("#log-hits > li[data-seq]")); }
  function goHit(i) {
    var items = hitItems();
    if (!items.length) return;
    hitAt = ((i % items.length) + items.length) % items.length;
    items.forEach(function (li, k) { li.classList.toggle("current", k === hitAt); });
    var count = document.getElementById("hit-count");
    if (count) count.textContent = (hitAt + 1) + " of " + items.length;
    var li = items[hitAt], nav = document.getElementById("log-nav");
    pendingHit = { it: li.getAttribute("data-it"), seq: parseInt(li.getAttribute("data-seq"), 10),
      q: nav ? nav.getAttribute("data-q") : "", li: li };
    hitEarlier = 0;
    openHit();
  }
  function openHit() {
    var t = pendingHit;
    if (!t) return;
    var d = document.getElementById("log-" + t.it);
    if (!d) {
      var more = document.querySelector("#show-earlier button");
      if (more && hitEarlier++ < 500) more.click();
      else pendingHit = null;
      return;
    }
    pendingHit = null;
    var st = state(d);
    st.target = t;
    st.follow = false;
    if (!d.open) d.open = true; // its toggle loads it
    else if (!st.loaded) loadLog(d);
    else if (!st.inflight) showTarget(d);
  }
  document.addEventListener("htmx:afterSettle", function (e) {
    if (e.target && e.target.id === "timeline-earlier" && pendingHit) openHit();
    if (e.target && e.target.id === "log-search-results") hitAt = -1;
  });
  // landHit finds the line of hit t in log d: in the block holding the
  // record (blocks carry the seq of their last record), the line with the
  // match that is as many matches in as the hit is hits in; null while the
  // block is not loaded yet.
  function landHit(d, t) {
    var blocks = d.querySelectorAll(".log-entry[data-seq]"), prev = 0, block = null;
    for (var i = 0; i < blocks.length; i++) {
      var seq = parseInt(blocks[i].getAttribute("data-seq"), 10);
      if (seq >= t.seq && blocks[i].querySelector(".ll")) { block = blocks[i]; break; }
      prev = seq;
    }
    if (!block) return null;
    var q = (t.q || "").toLowerCase(), lines = Array.prototype.slice.call(block.querySelectorAll(".ll"));
    var matching = lines.filter(function (l) { return q && l.textContent.toLowerCase().indexOf(q) >= 0; });
    var before = hitItems().filter(function (li) {
      var s = parseInt(li.getAttribute("data-seq"), 10);
      return li.getAttribute("data-it") === t.it && s > prev && s < t.seq;
    }).length;
    var line = matching.length ? matching[Math.min(before, matching.length - 1)] : lines[0];
    document.querySelectorAll(".ll.hl").forEach(function (el) { el.classList.remove("hl"); });
    document.querySelectorAll("mark.hit").forEach(function (m) {
      var p = m.parentNode;
      while (m.firstChild) p.insertBefore(m.firstChild, m);
      p.removeChild(m);
      p.normalize();
    });
    line.classList.add("hl");
    markText(line.querySelector(".lt") || line, t.q || "");
    history.replaceState(null, "", "#" + line.id);
    return line;
  }
  // markText wraps the first match of q in el's text in <mark class="hit">
  // (one per text node it spans, so the line's colours stay).
  function markText(el, q) {
    if (!q) return;
    var walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT), nodes = [], text = "";
    for (var n = walker.nextNode(); n; n = walker.nextNode()) { nodes.push({ n: n, at: text.length }); text += n.nodeValue; }
    var i = text.toLowerCase().indexOf(q.toLowerCase());
    if (i < 0) return;
    var end = i + q.length;
    nodes.forEach(function (x) {
      var s = Math.max(i, x.at), e = Math.min(end, x.at + x.n.nodeValue.length);
      if (s >= e) return;
      var node = x.n;
      if (e - x.at < node.nodeValue.length) node.splitText(e - x.at);
      if (s > x.at) node = node.splitText(s - x.at);
      var m = document.createElement("mark");
      m.className = "hit";
      node.parentNode.insertBefore(m, node);
      m.appendChild(node);
    });
  }
  document.addEventListener("click", function (e) {
    var a = e.target.closest ? e.target.closest("#log-hits [data-hit], #hit-next, #hit-prev") : null;
    if (!a) return;
    e.preventDefault();
    if (a.id === "hit-next") goHit(hitAt + 1);
    else if (a.id === "hit-prev") goHit(hitAt < 0 ? -1 : hitAt - 1);
    else goHit(parseInt(a.getAttribute("data-hit"), 10));
  });
  // Duration bars (.it-bar): the server draws the bars of the rows it
  // sends against the longest of those rows; redraw every bar of the page
  // against the longest on the page when rows come in.
  function rescaleBars() {
    var bars = document.querySelectorAll("#timeline-card .it-bar[data-ms]"), most = 0;
    bars.forEach(function (b) { most = Math.max(most, parseInt(b.getAttribute("data-ms"), 10) || 0); });
    if (!most) return;
    bars.forEach(function (b) {
      // The segments (model calls, work, checks) keep their shares.
      var r = b.querySelectorAll("rect"), sum = 0;
      if (!r.length) return;
      r.forEach(function (s) { sum += parseFloat(s.getAttribute("width")) || 0; });
      var total = Math.max(0.5, 100 * (parseInt(b.getAttribute("data-ms"), 10) || 0) / most), x = 0;
      r.forEach(function (s) {
        var w = sum > 0 ? total * (parseFloat(s.getAttribute("width")) || 0) / sum : total / r.length;
        s.setAttribute("x", x.toFixed(2));
        s.setAttribute("width", w.toFixed(2));
        x += w;
      });
    });
  }
  document.addEventListener("htmx:afterSettle", function (e) {
    var id = e.target && e.target.id;
    if (id === "timeline" || id === "timeline-earlier") rescaleBars();
  });
  // Forms with data-confirm ask first (Cancel).
  document.addEventListener("submit", function (e) {
    var f = e.target;
    var msg = f && f.getAttribute && f.getAttribute("data-confirm");
    if (msg && !window.confirm(msg)) e.preventDefault();
  }, true);
})();

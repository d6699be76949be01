package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"homework/engine/spec"
)

// seededIteration is an iteration seedHistoryRun stores: how long it took,
// how long its checks ran, how many one-line output records its transcript
// has, and which of them say "needle".
type seededIteration struct {
	took    time.Duration
	checkMS int64
	records int
	needles []int
}

// seedHistoryRun stores a finished run (a follow-up of parent when parent
// is not "") with its iterations and, after them, events: tools tool_call
// events then checks check_result events. Record k of an iteration is line
// k of its log.
func seedHistoryRun(t *testing.T, ts *testServer, userID int64, parent, objective, status string, its []seededIteration, tools, checks int) string {
	t.Helper()
	ctx := context.Background()
	id := fmt.Sprintf("hist-%d", time.Now().UnixNano())
	err := ts.Store.WriteTx(ctx, func(tx spec.Tx) error {
		start := tx.Now().Add(-time.Hour)
		run := &spec.Run{ID: id, UserID: userID, ParentRunID: parent, Objective: objective, Mode: "auto", Executor: "script",
			Config: json.RawMessage(`{"objective":"x","executor":"script","script":{"steps":[{}]}}`),
			Status: status, Iteration: len(its), StartedAt: start, CompletedAt: tx.Now()}
		run.Metrics.Iterations = len(its)
		if status != spec.StatusCompleted {
			run.CompletedAt = time.Time{}
		}
		if err := tx.InsertRun(ctx, run); err != nil {
			return err
		}
		at := start
		for i, s := range its {
			n := i + 1
			it := &spec.Iteration{RunID: id, Iteration: n, Attempt: 1, Status: spec.IterSucceeded, StartedAt: at, EndedAt: at.Add(s.took),
				Summary: fmt.Sprintf("Iteration %d", n), Gate: json.RawMessage(`{"decision":"continue","reasons":["more"]}`),
				Metrics: spec.Metrics{LLMCalls: 2, TokensTotal: 1500, CostTotalUSD: 0.0123}}
			if s.checkMS > 0 {
				it.CheckResults = []spec.CheckResult{{Name: "tests pass", Type: "command", Passed: true, DurationMS: s.checkMS}}
			}
			at = at.Add(s.took + time.Second)
			if err := tx.UpsertIteration(ctx, it); err != nil {
				return err
			}
			needle := map[int]bool{}
			for _, k := range s.needles {
				needle[k] = true
			}
			var lines []*spec.TranscriptLine
			for k := 1; k <= s.records; k++ {
				text := fmt.Sprintf("iteration %d line %d\n", n, k)
				if needle[k] {
					text = fmt.Sprintf("iteration %d line %d has a Needle in it\n", n, k)
				}
				lines = append(lines, &spec.TranscriptLine{Kind: spec.TranscriptOutput, Name: "stdout", Text: text})
			}
			if len(lines) > 0 {
				if _, _, err := tx.AppendTranscript(ctx, id, n, 8<<20, lines, 0); err != nil {
					return err
				}
			}
		}
		for i := range tools {
			if _, err := tx.AppendEvent(ctx, id, spec.EventToolCall, map[string]any{"iteration": 1, "tool": fmt.Sprintf("read_file %d", i), "args": map[string]string{"path": "notes.md"}}); err != nil {
				return err
			}
		}
		for i := range checks {
			if _, err := tx.AppendEvent(ctx, id, spec.EventCheckResult, map[string]any{"iteration": 2, "name": fmt.Sprintf("check %d", i), "passed": i%2 == 0, "message": "<b>not bold</b>"}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestBrowserRunPageReadsLikeALogViewer: a search's hits land on their
// lines (Next and Previous cycling through them, across iterations and
// pages of a log), each iteration's time is a bar, the event history
// filters, pages and expands, the live view lists its events newest first,
// and a follow-up shows the chain it is part of (#24).
func TestBrowserRunPageReadsLikeALogViewer(t *testing.T) {
	findChromium(t) // before any server starts: skip (or fail in CI) at once
	ts := newPageServer(t)
	ctx := newBrowser(t)
	do(t, ctx, "set up",
		chromedp.Navigate(ts.URL+"/setup"),
		chromedp.WaitVisible(chromedp.CSS("#password2")),
		chromedp.SendKeys(chromedp.CSS("#email"), "ada@example.com"),
		chromedp.SendKeys(chromedp.CSS("#password"), pagePassword),
		chromedp.SendKeys(chromedp.CSS("#password2"), pagePassword),
		chromedp.Submit(chromedp.CSS("#password2")),
		chromedp.WaitVisible(chromedp.CSS("#objective")),
	)
	ada, err := ts.DB.FindUserByEmail(ts.ctx, "ada@example.com")
	if err != nil {
		t.Fatal(err)
	}
	// Iteration 2's log is three pages (500 records a page); its hit is on
	// the third. Iteration 3 has two hits in one block.
	id := seedHistoryRun(t, ts, ada.ID, "", "Find the needles", spec.StatusCompleted, []seededIteration{
		{took: 1500 * time.Millisecond, records: 300, needles: []int{100}},
		{took: time.Minute, checkMS: 20_000, records: 1200, needles: []int{1100}},
		{took: 3 * time.Second, records: 50, needles: []int{20, 30}},
	}, 60, 5)

	// hitShown is true when line id is the one highlighted line, its match
	// marked, inside its log's box and the window.
	hitShown := func(line, text string) string {
		// window.__why says what is not so yet, for until's failure.
		return fmt.Sprintf(`(() => {
			const why = s => { window.__why = s; return false; };
			const l = document.getElementById(%q), box = l && l.closest(".log-lines");
			if (!l) return why("no such line; logs loaded: " + Array.from(document.querySelectorAll("details.log")).map(d => d.id + (d.open ? " open " : " closed ") + d.querySelectorAll(".ll").length + " lines").join(", "));
			if (!l.classList.contains("hl") || document.querySelectorAll(".ll.hl").length !== 1 || !l.closest("details.log").open) return why("not the one highlighted line in an open log: " + document.querySelectorAll(".ll.hl").length + " highlighted");
			const m = l.querySelectorAll("mark.hit");
			if (m.length !== 1 || m[0].textContent !== "Needle" || document.querySelectorAll("mark.hit").length !== 1) return why("marks: " + m.length + " in the line, " + document.querySelectorAll("mark.hit").length + " on the page");
			const r = l.getBoundingClientRect(), b = box.getBoundingClientRect();
			if (l.textContent !== %q) return why("text: " + l.textContent);
			if (!(r.top >= b.top && r.bottom <= b.bottom && r.top >= 0 && r.bottom <= innerHeight)) return why("out of view: line " + r.top + "-" + r.bottom + ", its box " + b.top + "-" + b.bottom + ", window 0-" + innerHeight + ", box scrollTop " + box.scrollTop + ", window scrollY " + scrollY);
			window.__why = "the hit is shown; what the condition adds to it is not so yet";
			return true;
		})()`, line, text)
	}
	t.Run("Next and Previous land on each hit's line, across pages of a log, and cycle", func(t *testing.T) {
		do(t, ctx, "search", chromedp.Navigate(ts.URL+"/runs/"+id), chromedp.WaitVisible(chromedp.CSS("#log-q")),
			chromedp.SendKeys(chromedp.CSS("#log-q"), "needle"), chromedp.Click(chromedp.CSS(".log-search button")))
		until(t, ctx, "four hits", `document.querySelectorAll("#log-hits > li").length === 4 && document.querySelector("#hit-count").textContent.trim() === "4 hits"`)
		do(t, ctx, "next", chromedp.Click(chromedp.CSS("#hit-next")))
		until(t, ctx, "the first hit: line 100 of iteration 1", hitShown("i1-L100", "iteration 1 line 100 has a Needle in it")+
			` && document.querySelector("#hit-count").textContent.trim() === "1 of 4"`)
		do(t, ctx, "next again", chromedp.Click(chromedp.CSS("#hit-next")))
		until(t, ctx, "the second hit: line 1100 of iteration 2, on the log's third page", hitShown("i2-L1100", "iteration 2 line 1100 has a Needle in it")+
			` && document.querySelector("#hit-count").textContent.trim() === "2 of 4" && document.querySelector("#log-hits > li.current").getAttribute("data-it") === "2" && location.hash === "#i2-L1100"`)
		do(t, ctx, "next twice more", chromedp.Click(chromedp.CSS("#hit-next")))
		until(t, ctx, "the third hit: line 20 of iteration 3", hitShown("i3-L20", "iteration 3 line 20 has a Needle in it"))
		do(t, ctx, "next", chromedp.Click(chromedp.CSS("#hit-next")))
		until(t, ctx, "the fourth hit, in the same block: line 30", hitShown("i3-L30", "iteration 3 line 30 has a Needle in it")+
			` && document.querySelector("#hit-count").textContent.trim() === "4 of 4"`)
		do(t, ctx, "next past the last", chromedp.Click(chromedp.CSS("#hit-next")))
		until(t, ctx, "back to the first", hitShown("i1-L100", "iteration 1 line 100 has a Needle in it")+
			` && document.querySelector("#hit-count").textContent.trim() === "1 of 4"`)
		do(t, ctx, "previous from the first", chromedp.Click(chromedp.CSS("#hit-prev")))
		until(t, ctx, "the last", hitShown("i3-L30", "iteration 3 line 30 has a Needle in it"))
		do(t, ctx, "click the second hit", chromedp.Click(chromedp.CSS(`#log-hits [data-hit="1"]`)))
		until(t, ctx, "the second hit again", hitShown("i2-L1100", "iteration 2 line 1100 has a Needle in it")+
			` && document.querySelector("#hit-count").textContent.trim() === "2 of 4"`)
	})

	t.Run("a hit in an iteration before the rows shown loads the earlier rows and lands", func(t *testing.T) {
		its := make([]seededIteration, 24)
		for i := range its {
			its[i] = seededIteration{took: time.Second, records: 40}
		}
		its[1].needles, its[1].took = []int{33}, time.Minute
		long := seedHistoryRun(t, ts, ada.ID, "", "Long", spec.StatusCompleted, its, 0, 0)
		do(t, ctx, "search", chromedp.Navigate(ts.URL+"/runs/"+long), chromedp.WaitVisible(chromedp.CSS("#log-q")),
			chromedp.SendKeys(chromedp.CSS("#log-q"), "needle"), chromedp.Click(chromedp.CSS(".log-search button")))
		until(t, ctx, "one hit, its iteration not on the page", `document.querySelectorAll("#log-hits > li").length === 1 && !document.getElementById("log-2")`)
		do(t, ctx, "next", chromedp.Click(chromedp.CSS("#hit-next")))
		until(t, ctx, "line 33 of iteration 2", hitShown("i2-L33", "iteration 2 line 33 has a Needle in it"))
		// The rows shown first were drawn against their own longest, a
		// second; the earlier rows brought the minute.
		until(t, ctx, "every bar redrawn against the minute-long iteration", `(() => {
			const w = n => document.querySelector("#iteration-" + n + " .it-bar rect").getBoundingClientRect().width;
			return Math.abs(w(24) / w(2) - 1/60) < 0.005 && Math.abs(w(1) / w(2) - 1/60) < 0.005;
		})()`)
	})

	t.Run("each iteration is a bar as long as its time, its checks a segment, its numbers on hover", func(t *testing.T) {
		do(t, ctx, "open the run", chromedp.Navigate(ts.URL+"/runs/"+id), chromedp.WaitVisible(chromedp.CSS("#iteration-3")))
		until(t, ctx, "the minute-long iteration's bar wider than the others, each in proportion", `(() => {
			const w = n => { const b = document.querySelector("#iteration-" + n + " .it-bar"); return Array.from(b.querySelectorAll("rect")).reduce((s, r) => s + r.getBoundingClientRect().width, 0); };
			const full = document.querySelector("#iteration-2 .it-bar").getBoundingClientRect().width;
			return Math.abs(w(2) - full) < 1 && w(1) < w(3) && w(3) < w(2) && Math.abs(w(3) / w(2) - 0.05) < 0.01 && w(1) > 0;
		})()`)
		until(t, ctx, "the checks' third of iteration 2 as a segment", `(() => {
			const c = document.querySelector("#iteration-2 .it-bar rect.c"), all = document.querySelector("#iteration-2 .it-bar").getBoundingClientRect().width;
			return c && Math.abs(c.getBoundingClientRect().width / all - 1/3) < 0.01 && !document.querySelector("#iteration-1 .it-bar rect.c");
		})()`)
		until(t, ctx, "the hover text: start, time, checks, calls, tokens, cost", `(() => {
			const t = document.querySelector("#iteration-2 .it-bar").title;
			return /^Started \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC · took 1m 0s · checks 20\.0s · 2 model calls · 1500 tokens · \$0\.0123$/.test(t);
		})()`)
	})

	t.Run("the event history filters by type, pages back and shows a payload indented", func(t *testing.T) {
		do(t, ctx, "open the history", chromedp.Navigate(ts.URL+"/runs/"+id), chromedp.WaitVisible(chromedp.CSS("#events-card > summary")),
			chromedp.Click(chromedp.CSS("#events-card > summary")))
		until(t, ctx, "the newest 50 events, newest first", `(() => {
			const rows = Array.from(document.querySelectorAll("#events-table tbody tr"));
			return rows.length === 50 && rows[0].id === "event-65" && rows[49].id === "event-16" && !!document.querySelector("#events-older");
		})()`)
		do(t, ctx, "older", chromedp.Click(chromedp.CSS("#events-older")))
		until(t, ctx, "the 15 older events and no further page", `(() => {
			const rows = Array.from(document.querySelectorAll("#events-table tbody tr"));
			return rows.length === 15 && rows[0].id === "event-15" && rows[14].id === "event-1" && !document.querySelector("#events-older") && !!document.querySelector("#events-newest");
		})()`)
		do(t, ctx, "filter by check_result", chromedp.SetValue(chromedp.CSS("#event-type"), "check_result"),
			chromedp.Evaluate[chromedp.Void](`document.querySelector("#event-type").dispatchEvent(new Event("change", {bubbles: true}))`))
		until(t, ctx, "only the five check results", `(() => {
			const rows = Array.from(document.querySelectorAll("#events-table tbody tr"));
			return rows.length === 5 && rows.every(r => r.getAttribute("data-type") === "check_result") && rows[0].id === "event-65" &&
				document.querySelector("#event-type").value === "check_result" && Array.from(document.querySelectorAll("#event-type option")).map(o => o.value).join() === ",check_result,tool_call";
		})()`)
		do(t, ctx, "expand the newest", chromedp.Click(chromedp.CSS("#event-65 details.event > summary")))
		until(t, ctx, "its payload indented, its markup as text", `(() => {
			const pre = document.querySelector("#event-65 pre.event-json");
			return pre && pre.getBoundingClientRect().height > 0 && pre.textContent.includes('{\n  "iteration": 2,') &&
				pre.textContent.includes('"message": "<b>not bold</b>"') && !pre.querySelector("b") &&
				document.querySelector("#event-65 summary").textContent.trim() === "iteration 2 · check 4";
		})()`)
	})

	t.Run("the live view lists its latest events newest first, readable", func(t *testing.T) {
		do(t, ctx, "open the live view", chromedp.Navigate(ts.URL+"/runs/"+id), chromedp.WaitVisible(chromedp.CSS("#open-live")),
			chromedp.Click(chromedp.CSS("#open-live")))
		until(t, ctx, "30 events, newest first, each a summary with its payload folded", `(() => {
			const li = Array.from(document.querySelectorAll("#live-events > li"));
			const seqs = li.map(l => parseInt(l.getAttribute("data-seq"), 10));
			return li.length === 30 && seqs[0] === 65 && seqs.every((s, i) => i === 0 || s === seqs[i - 1] - 1) &&
				li.every(l => l.querySelector("details.event > summary") && !l.querySelector("details.event").open) &&
				li[0].querySelector("summary").textContent.trim() === "iteration 2 · check 4" && !li[0].textContent.trim().startsWith("{");
		})()`)
		do(t, ctx, "open the newest event's payload", chromedp.Click(chromedp.CSS(`#live-events > li[data-seq="65"] > details.event > summary`)))
		if _, err := ts.Store.AppendEvent(ts.ctx, id, spec.EventToolCall, map[string]any{"iteration": 3, "tool": "write_file"}); err != nil {
			t.Fatal(err)
		}
		do(t, ctx, "an event refreshes the live view", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(
			`document.dispatchEvent(new CustomEvent("hw:event", {detail: {type: "tool_call", run_id: %q}}))`, id)))
		until(t, ctx, "the new event on top, the opened payload still open", `(() => {
			const li = document.querySelectorAll("#live-events > li");
			return li.length === 30 && li[0].getAttribute("data-seq") === "66" && li[0].querySelector("summary").textContent.trim() === "iteration 3 · write_file" &&
				document.querySelector('#live-events > li[data-seq="65"] > details.event').open && !li[0].querySelector("details.event").open;
		})()`)
	})

	// Acting on new content the moment it is in the page: in the microtask
	// after htmx put it there (a MutationObserver's callback), before any
	// timer, as a person's click may when the page is busy.
	t.Run("a filter chosen or a hit picked the moment it appears takes effect", func(t *testing.T) {
		do(t, ctx, "open the history", chromedp.Navigate(ts.URL+"/runs/"+id), chromedp.WaitVisible(chromedp.CSS("#events-card > summary")),
			chromedp.Click(chromedp.CSS("#events-card > summary")))
		until(t, ctx, "the newest 50 events", `document.querySelectorAll("#events-table tbody tr").length === 50 && !!document.querySelector("#events-older")`)
		do(t, ctx, "choose check_result as the older page arrives", chromedp.Evaluate[chromedp.Void](`(() => {
			const o = new MutationObserver(() => {
				const sel = document.querySelector("#event-history #event-type");
				if (!sel) return;
				o.disconnect();
				sel.value = "check_result";
				sel.dispatchEvent(new Event("change", {bubbles: true}));
			});
			o.observe(document.getElementById("event-history"), {childList: true});
			document.getElementById("events-older").click();
		})()`))
		until(t, ctx, "only the five check results", `(() => {
			const rows = Array.from(document.querySelectorAll("#events-table tbody tr"));
			return rows.length === 5 && rows.every(r => r.getAttribute("data-type") === "check_result");
		})()`)

		do(t, ctx, "search, and pick the first hit as the hits arrive", chromedp.Navigate(ts.URL+"/runs/"+id), chromedp.WaitVisible(chromedp.CSS("#log-q")),
			chromedp.SendKeys(chromedp.CSS("#log-q"), "needle"),
			chromedp.Evaluate[chromedp.Void](`(() => {
				const o = new MutationObserver(() => {
					const next = document.getElementById("hit-next");
					if (!next) return;
					o.disconnect();
					next.click();
				});
				o.observe(document.getElementById("log-search-results"), {childList: true});
				document.querySelector(".log-search button").click();
			})()`))
		until(t, ctx, "the first hit", hitShown("i1-L100", "iteration 1 line 100 has a Needle in it")+
			` && document.querySelector("#hit-count").textContent.trim() === "1 of 4"`)
		do(t, ctx, "next", chromedp.Click(chromedp.CSS("#hit-next")))
		until(t, ctx, "the second hit, not the first again", hitShown("i2-L1100", "iteration 2 line 1100 has a Needle in it")+
			` && document.querySelector("#hit-count").textContent.trim() === "2 of 4"`)
	})

	t.Run("a follow-up's page shows the run it came from and its own follow-ups, with their statuses", func(t *testing.T) {
		parent := seedHistoryRun(t, ts, ada.ID, "", "The first question", spec.StatusCompleted, nil, 0, 0)
		middle := seedHistoryRun(t, ts, ada.ID, parent, "A follow-up", spec.StatusCompleted, nil, 0, 0)
		child := seedHistoryRun(t, ts, ada.ID, middle, "A follow-up of the follow-up", spec.StatusStopped, nil, 0, 0)
		do(t, ctx, "open the middle run", chromedp.Navigate(ts.URL+"/runs/"+middle), chromedp.WaitVisible(chromedp.CSS("#run-live")))
		until(t, ctx, "the parent above the run and the follow-up below it, with statuses", fmt.Sprintf(`(() => {
			const p = document.getElementById("lineage-%s"), c = document.getElementById("lineage-%s"), me = document.querySelector("#lineage li.this-run");
			return p && c && me && p.getAttribute("href") === "/runs/%s" && c.getAttribute("href") === "/runs/%s" &&
				p.nextElementSibling.textContent === "Completed" && c.nextElementSibling.textContent === "Stopped" &&
				me.contains(c) && !me.contains(p) && p.closest("li").contains(me) && me.querySelector(".badge").textContent === "Completed";
		})()`, parent, child, parent, child))
		do(t, ctx, "open the parent", chromedp.Navigate(ts.URL+"/runs/"+parent), chromedp.WaitVisible(chromedp.CSS("#run-live")))
		until(t, ctx, "its follow-up and theirs, two levels", fmt.Sprintf(`(() => {
			const m = document.getElementById("lineage-%s"), c = document.getElementById("lineage-%s");
			return m && c && m.closest("li").contains(c) && document.querySelector("#lineage li.this-run").contains(m);
		})()`, middle, child))
	})
}

package handlers

import (
	"context"
	"fmt"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"homework/engine/scripted"
	"homework/engine/spec"
)

// noWebLocks makes the tab's pages run without navigator.locks, as on
// plain http to a LAN address (Web Locks exist only in secure contexts,
// and 127.0.0.1 is one): the script runs in every new document before the
// page's own.
func noWebLocks() chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
			Source: `delete Navigator.prototype.locks;`,
		})
		return err
	})
}

// streamPeak is the most event subscriptions the bus had at once while it
// watches: the bus's own high-water mark, so a stream that opens and closes
// at once is counted too.
type streamPeak struct{ ts *testServer }

func watchStreams(ts *testServer) *streamPeak {
	ts.Bus.ResetPeak()
	return &streamPeak{ts: ts}
}

func (p *streamPeak) end() int { return p.ts.Bus.PeakSubscribers() }

// TestBrowserTabsShareOneStreamOnPlainHTTP opens six run pages in tabs of
// a browser without Web Locks and checks that they hold one event stream
// between them (counted on the server's bus) and all keep updating; that
// when the tab holding the stream closes another takes it over and the
// rest keep updating; and that when the holder freezes another takes over,
// and the frozen tab, woken, gives its stream up and follows.
func TestBrowserTabsShareOneStreamOnPlainHTTP(t *testing.T) {
	ts := newPageServer(t)
	ctx := newBrowser(t)
	do(t, ctx, "set up",
		noWebLocks(),
		chromedp.Navigate(ts.URL+"/setup"),
		chromedp.WaitVisible(chromedp.CSS("#password2")),
		chromedp.SendKeys(chromedp.CSS("#email"), "ada@example.com"),
		chromedp.SendKeys(chromedp.CSS("#password"), pagePassword),
		chromedp.SendKeys(chromedp.CSS("#password2"), pagePassword),
		chromedp.Submit(chromedp.CSS("#password2")),
		chromedp.WaitVisible(chromedp.CSS("#objective")),
	)
	if locks, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`"locks" in navigator`)); err != nil || locks {
		t.Fatalf("navigator.locks is still there (%v)", err)
	}
	// The first tab leaves the site: six run tabs are all there is.
	do(t, ctx, "leave the site", chromedp.Navigate("about:blank"))
	waitUntil(t, "the first tab's stream to end", func() bool { return ts.Bus.Subscribers() == 0 })
	ada, err := ts.DB.FindUserByEmail(ts.ctx, "ada@example.com")
	if err != nil {
		t.Fatal(err)
	}
	u := &testUser{User: ada}

	// Each run asks, works, asks again, works, asks a third time and
	// completes: it waits for the test between phases.
	var ids []string
	for i := range 6 {
		run, err := ts.Engine.CreateRun(ts.ctx, ada, spec.Config{Objective: fmt.Sprint("plain http tab ", i), Executor: spec.ExecutorScript,
			Script: script(askStep("first?"), scripted.Step{Summary: "working", SleepMS: 100}, askStep("second?"),
				scripted.Step{Summary: "working more", SleepMS: 100}, askStep("third?"), doneStep("done"))})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, run.ID)
		ts.waitStatus(t, u, run.ID, spec.StatusWaiting)
	}
	tabs := make([]context.Context, 6)
	closeTab := make([]context.CancelFunc, 6)
	for i, id := range ids {
		tabs[i], closeTab[i] = chromedp.NewContext(ctx)
		t.Cleanup(closeTab[i])
		do(t, tabs[i], fmt.Sprint("open tab ", i), noWebLocks(), chromedp.Navigate(ts.URL+"/runs/"+id), chromedp.WaitVisible(chromedp.CSS("#run-live")))
	}
	// roles returns each open tab's part in the feed.
	roles := func(open []int) (leaders []int, all []string) {
		for _, i := range open {
			r, err := chromedp.Run(tabs[i], chromedp.Evaluate[string](`document.documentElement.dataset.feed || ""`))
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, r)
			if r == "leader" {
				leaders = append(leaders, i)
			}
		}
		return leaders, all
	}
	// takenBy says why tab i took the lead: "start", "bye" (the leader
	// closed and said so) or "lease" (the leader fell silent).
	takenBy := func(i int) string {
		by, err := chromedp.Run(tabs[i], chromedp.Evaluate[string](`document.documentElement.dataset.feedBy || ""`))
		if err != nil {
			t.Fatal(err)
		}
		return by
	}
	settle := func(open []int) int {
		t.Helper()
		var leaders []int
		var all []string
		waitUntil(t, "one tab to lead the others and hold the one stream", func() bool {
			leaders, all = roles(open)
			return len(leaders) == 1 && ts.Bus.Subscribers() == 1
		})
		for _, r := range all {
			if r != "leader" && r != "follower" {
				t.Fatalf("tab roles %v", all)
			}
		}
		return leaders[0]
	}
	// showWaitingAt waits until tab i shows its run waiting again after n
	// iterations, or completed.
	shows := func(i int, status string, iterations int) {
		t.Helper()
		until(t, tabs[i], fmt.Sprint("tab ", i, " to show ", status, " after ", iterations, " iterations"), fmt.Sprintf(
			`document.querySelector("#run-live .badge").dataset.status === %q && document.querySelector("#iterations").textContent === "%d"`,
			status, iterations))
	}
	answer := func(i int) {
		t.Helper()
		if _, err := ts.Engine.Respond(ts.ctx, ada.ID, ids[i], []string{"yes"}); err != nil {
			t.Fatal(err)
		}
	}

	open := []int{0, 1, 2, 3, 4, 5}
	leader := settle(open)
	peak := watchStreams(ts)
	for _, i := range open {
		answer(i)
	}
	for _, i := range open {
		shows(i, spec.StatusWaiting, 3)
	}
	if n := peak.end(); n > 1 {
		t.Fatalf("%d event streams open at once while six tabs updated; want one", n)
	}
	if again, _ := roles(open); len(again) != 1 || again[0] != leader {
		t.Fatalf("the lead moved from tab %d to %v without a tab closing", leader, again)
	}

	// The leader closes: another tab takes the stream over, and the five
	// left keep updating.
	closeTab[leader]()
	open = append(open[:leader:leader], open[leader+1:]...)
	next := settle(open)
	if by := takenBy(next); by != "bye" {
		t.Errorf("tab %d took over from the closed tab %d on %q, not on its goodbye", next, leader, by)
	}
	peak = watchStreams(ts)
	for _, i := range open {
		answer(i)
	}
	for _, i := range open {
		shows(i, spec.StatusWaiting, 5)
	}
	if n := peak.end(); n > 1 {
		t.Fatalf("%d event streams open at once after the takeover; want one", n)
	}

	// The leader freezes (its timers stop): after the lease another tab
	// takes over and the others keep updating. The frozen tab closes its
	// stream when it hears the newer leader, and follows.
	frozen := next
	lifecycle := func(state page.SetWebLifecycleStateState) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			_, err := cdp.Call(ctx, t, page.SetWebLifecycleState, page.SetWebLifecycleStateParams{State: state})
			return err
		})
	}
	do(t, tabs[frozen], "freeze the leader", lifecycle(page.SetWebLifecycleStateStateFrozen))
	var awake []int
	for _, i := range open {
		if i != frozen {
			awake = append(awake, i)
		}
	}
	var leaders []int
	waitUntil(t, "another tab to take the lead from the frozen one", func() bool {
		leaders, _ = roles(awake)
		return len(leaders) == 1
	})
	if by := takenBy(leaders[0]); by != "lease" {
		t.Errorf("tab %d took over from the frozen tab on %q, not after the lease", leaders[0], by)
	}
	for _, i := range awake {
		answer(i)
	}
	for _, i := range awake {
		shows(i, spec.StatusCompleted, 6)
	}
	do(t, tabs[frozen], "wake the frozen tab", lifecycle(page.SetWebLifecycleStateStateActive))
	if again := settle(open); again == frozen {
		t.Fatalf("the woken tab %d took the lead back", frozen)
	}
	answer(frozen)
	shows(frozen, spec.StatusCompleted, 6)
}

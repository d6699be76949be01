package handlers

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/a-h/templ"
	"github.com/gofiber/fiber/v2"

	"homework/engine"
	"homework/engine/spec"
	"homework/views"
)

// modalEvents is how many of the latest events the live modal lists.
const modalEvents = 30

// recentIterations is how many of the latest iterations the run page shows
// at first; "Show earlier" loads more, this many at a time.
const recentIterations = 20

// runParts selects what runView loads, so that each live fragment reads
// only what it shows.
type runParts uint

const (
	partStatus runParts = 1 << iota
	partTimeline
	partWork
	partModal
	// partPage is what the whole page shows: the live modal's content is
	// fetched when the modal opens.
	partPage = partStatus | partTimeline | partWork
)

// runView loads the parts of the run page in parts, every read in one
// snapshot. Another user's run is ENOTFOUND.
func (s *Server) runView(c *fiber.Ctx, runID string, parts runParts) (v views.RunView, err error) {
	err = s.db.ReadTx(c.UserContext(), func(r spec.ReadStore) error {
		v, err = s.readRunView(c, r, runID, parts)
		return err
	})
	return v, err
}

// readRunView reads the parts of the run page from r. The feed cursor (in
// page) is of the same snapshot as the run: the page's stream replays
// every event committed after what it shows.
func (s *Server) readRunView(c *fiber.Ctx, r spec.ReadStore, runID string, parts runParts) (views.RunView, error) {
	ctx := c.UserContext()
	u := userOf(c)
	page := s.pageFrom(c, r, "")
	run, err := r.FindRun(ctx, u.ID, runID)
	if err != nil {
		return views.RunView{}, err
	}
	page.Title = run.Objective
	if r := []rune(page.Title); len(r) > 60 {
		page.Title = string(r[:59]) + "…"
	}
	v := views.RunView{Page: page, Run: run, Now: s.db.Now()}
	if v.Config, err = engine.RunConfig(run); err != nil {
		s.log.Warn("run config", "run", run.ID, "err", err)
		v.Config = nil
	}
	if parts&partStatus != 0 {
		if v.Config != nil {
			if v.Forecast, err = runForecast(ctx, r, run); err != nil {
				return views.RunView{}, err
			}
		}
		if rep := reportOf(run); rep.Title != "" || rep.Status != "" {
			v.Report = &rep
			v.ReportHTML = renderMarkdown().HTML(rep.Summary)
			v.Created, v.Updated = rep.WhatChanged.Created, rep.WhatChanged.Updated
		}
		if run.StopReason != nil && len(run.StopReason.Evidence) > 0 {
			var ev views.Evidence
			if json.Unmarshal(run.StopReason.Evidence, &ev) == nil && ev.Breaker != "" {
				v.Evidence = &ev
			}
		}
	}
	if parts&partTimeline != 0 {
		if err := s.loadTimeline(c, r, &v, 0); err != nil {
			return v, err
		}
	}
	if parts&(partWork|partModal) != 0 {
		docs, err := r.ListRunDocuments(ctx, u.ID, run.ID)
		if err != nil {
			return v, err
		}
		v.Tree = docTree(docs)
		v.Scratchpad, v.Branch = scratchpadAndBranch(docs)
		if v.Tasks, err = r.ListTasks(ctx, u.ID, run.ID); err != nil {
			return v, err
		}
	}
	if parts&partModal != 0 {
		last, err := r.LastSeq(ctx, run.ID)
		if err != nil {
			return v, err
		}
		if v.Events, err = r.ListRunEvents(ctx, u.ID, run.ID, max(0, last-modalEvents), modalEvents); err != nil {
			return v, err
		}
	}
	return v, nil
}

// loadTimeline loads the timeline's iterations: from iteration from on
// when from > 0 (a live refresh keeps every row the page showed), else the
// latest recentIterations; v.EarlierBefore says where "Show earlier"
// continues.
func (s *Server) loadTimeline(c *fiber.Ctx, r spec.ReadStore, v *views.RunView, from int) error {
	ctx := c.UserContext()
	u := userOf(c)
	var page *spec.IterationPage
	var err error
	if from > 0 {
		page, err = r.PageIterations(ctx, u.ID, v.Run.ID, fmt.Sprintf("i%d", from-1), 200, false)
		if err != nil {
			return err
		}
	} else {
		page, err = r.PageIterations(ctx, u.ID, v.Run.ID, "", recentIterations, true)
		if err != nil {
			return err
		}
		slices.Reverse(page.Iterations)
	}
	v.Iterations = iterationViews(page)
	if err := attachActions(ctx, r, v.Run, u.Email, v.Iterations); err != nil {
		return err
	}
	if len(v.Iterations) > 0 {
		v.TimelineFrom = v.Iterations[0].Iteration
		v.EarlierBefore = v.TimelineFrom
		if v.EarlierBefore <= 1 {
			v.EarlierBefore = 0
		}
	}
	if v.Report == nil {
		v.Created, v.Updated = outputsOf(v.Iterations)
	}
	return nil
}

// iterationViews decodes a page of iterations with their transcript sizes.
func iterationViews(page *spec.IterationPage) []views.IterationView {
	out := make([]views.IterationView, 0, len(page.Iterations))
	for _, it := range page.Iterations {
		iv := iterationView(it)
		if t := page.Transcripts[it.Iteration]; t != nil {
			iv.Transcript = *t
		}
		out = append(out, iv)
	}
	return out
}

// outputsOf collects what the iterations created and updated, each once.
func outputsOf(its []views.IterationView) (created, updated []spec.Ref) {
	seen := map[string]bool{}
	for _, iv := range its {
		for _, r := range iv.Created {
			if k := r.Type + r.ID; !seen[k] {
				seen[k] = true
				created = append(created, r)
			}
		}
		for _, r := range iv.Updated {
			if k := r.Type + r.ID; !seen[k] {
				seen[k] = true
				updated = append(updated, r)
			}
		}
	}
	return created, updated
}

// scratchpadAndBranch finds the run's scratchpad and the branch being
// explored: the most recently updated document under branches/ (or of kind
// branch).
func scratchpadAndBranch(docs []*spec.Document) (*spec.Document, string) {
	var pad, latest *spec.Document
	for _, d := range docs {
		if d.Kind == spec.DocScratchpad || d.Path == "scratchpad.md" {
			pad = d
		}
		if (d.Kind == spec.DocBranch || strings.HasPrefix(d.Path, "branches/")) && (latest == nil || d.UpdatedAt.After(latest.UpdatedAt)) {
			latest = d
		}
	}
	if latest == nil {
		return pad, ""
	}
	if latest.Kind == spec.DocBranch {
		return pad, latest.Path
	}
	parts := strings.SplitN(latest.Path, "/", 3)
	if len(parts) >= 2 {
		return pad, parts[0] + "/" + parts[1]
	}
	return pad, latest.Path
}

// docTree arranges documents by parent_id. Documents whose parent is not in
// the run are roots.
func docTree(docs []*spec.Document) []*views.DocNode {
	nodes := make(map[string]*views.DocNode, len(docs))
	for _, d := range docs {
		nodes[d.ID] = &views.DocNode{Doc: d}
	}
	var roots []*views.DocNode
	for _, d := range docs {
		n := nodes[d.ID]
		if p, ok := nodes[d.ParentID]; ok && d.ParentID != d.ID {
			p.Children = append(p.Children, n)
		} else {
			roots = append(roots, n)
		}
	}
	// A root workspace document with no content of its own is only a
	// container: show its children at the top.
	if len(roots) == 1 && roots[0].Doc.Path == "" && len(roots[0].Children) > 0 && strings.TrimSpace(roots[0].Doc.Content) == "" {
		roots = roots[0].Children
	}
	var sortNodes func([]*views.DocNode)
	sortNodes = func(ns []*views.DocNode) {
		sort.SliceStable(ns, func(i, j int) bool { return ns[i].Doc.Path < ns[j].Doc.Path })
		for _, n := range ns {
			sortNodes(n.Children)
		}
	}
	sortNodes(roots)
	return roots
}

// iterationView shows an iteration row with its gate, checks and artifacts.
func iterationView(it *spec.Iteration) views.IterationView {
	iv := views.IterationView{
		Iteration: it.Iteration, Attempt: it.Attempt, Status: it.Status, Summary: it.Summary, Error: it.Error,
		StartedAt: it.StartedAt, EndedAt: it.EndedAt, Metrics: it.Metrics,
	}
	if g := it.GateRecord; g != nil {
		iv.Decision, iv.Reasons = g.Decision.Decision, g.Reasons
	}
	iv.Checks = it.CheckResults
	iv.Created, iv.Updated = it.ArtifactRefs.Created, it.ArtifactRefs.Updated
	return iv
}

// reportOf decodes a run's report; the zero Report when it has none.
func reportOf(r *spec.Run) spec.Report {
	if r.Report == nil {
		return spec.Report{}
	}
	return *r.Report
}

func (s *Server) runPage(c *fiber.Ctx) error {
	// Opening a run reads its notifications, before the layout counts them.
	// An unknown run changes nothing and is a 404 below.
	if _, err := s.db.MarkRunNotificationsRead(c.UserContext(), userOf(c).ID, c.Params("id")); err != nil {
		return s.pageError(c, err)
	}
	v, err := s.runView(c, c.Params("id"), partPage)
	if err != nil {
		return s.pageError(c, err)
	}
	v.Flash = flashText(c.Query("done"))
	return s.render(c, fiber.StatusOK, views.RunPage(v))
}

// runFragment renders one live part of the run page (its content, swapped
// into the part's element).
func (s *Server) runFragment(c *fiber.Ctx, parts runParts, part func(views.RunView) templ.Component) error {
	v, err := s.runView(c, c.Params("id"), parts)
	if err != nil {
		return s.pageError(c, err)
	}
	return s.render(c, fiber.StatusOK, part(v))
}

func (s *Server) runLive(c *fiber.Ctx) error {
	return s.runFragment(c, partStatus, views.RunLiveBody)
}
func (s *Server) runControls(c *fiber.Ctx) error {
	return s.runFragment(c, 0, views.RunControlsBody)
}
func (s *Server) runAnswer(c *fiber.Ctx) error { return s.runFragment(c, 0, views.RunAnswerBody) }
func (s *Server) runWork(c *fiber.Ctx) error   { return s.runFragment(c, partWork, views.RunWorkBody) }
func (s *Server) runModal(c *fiber.Ctx) error {
	return s.runFragment(c, partModal, views.LiveModalContent)
}

// runTimeline renders timeline rows: ?from=N the rows from iteration N on
// (the live update: row N replaces the page's last row out of band, the
// rest are appended, so an event costs the same however long the run),
// ?before=N up to recentIterations rows before N ("Show
// earlier"), else the latest rows.
func (s *Server) runTimeline(c *fiber.Ctx) error {
	from, err := queryInt(c, "from", 0, 0, 1<<31)
	if err != nil {
		return s.pageError(c, err)
	}
	before, err := queryInt(c, "before", 0, 0, 1<<31)
	if err != nil {
		return s.pageError(c, err)
	}
	var v views.RunView
	err = s.db.ReadTx(c.UserContext(), func(r spec.ReadStore) error {
		if v, err = s.readRunView(c, r, c.Params("id"), 0); err != nil {
			return err
		}
		if before == 0 {
			return s.loadTimeline(c, r, &v, int(from))
		}
		page, err := r.PageIterations(c.UserContext(), userOf(c).ID, v.Run.ID, fmt.Sprintf("i%d", before), recentIterations, true)
		if err != nil {
			return err
		}
		slices.Reverse(page.Iterations)
		v.Iterations = iterationViews(page)
		return attachActions(c.UserContext(), r, v.Run, userOf(c).Email, v.Iterations)
	})
	if err != nil {
		return s.pageError(c, err)
	}
	if before > 0 {
		v.EarlierBefore = 0
		if len(v.Iterations) > 0 && v.Iterations[0].Iteration > 1 {
			v.EarlierBefore = v.Iterations[0].Iteration
		}
		return s.render(c, fiber.StatusOK, views.TimelineEarlier(v))
	}
	v.TimelineTail = from > 0
	return s.render(c, fiber.StatusOK, views.TimelineRows(v))
}

// logPageLines is how many transcript lines one log fetch returns.
const logPageLines = 500

// runLog renders an iteration's log for the run page: the blocks of its
// transcript after ?after=SEQ, their lines numbered on from ?line=K (the
// lines the page shows before them).
func (s *Server) runLog(c *fiber.Ctx) error {
	n, after, err := transcriptQuery(c)
	if err != nil {
		return s.pageError(c, err)
	}
	line, err := queryInt(c, "line", 0, 0, 1<<40)
	if err != nil {
		return s.pageError(c, err)
	}
	t, err := s.db.FindTranscript(c.UserContext(), userOf(c).ID, c.Params("id"), n, after, logPageLines)
	if err != nil {
		return s.pageError(c, err)
	}
	return s.render(c, fiber.StatusOK, views.LogBlocks(logPage(c.Params("id"), n, after, int(line), t)))
}

// logPage renders a page of an iteration's transcript, read after seq
// after, as log blocks numbered on from line.
func logPage(runID string, iteration int, after int64, line int, t *spec.Transcript) views.LogPage {
	p := views.LogPage{RunID: runID, Iteration: iteration, More: t.More, Info: t.Info}
	blocks := groupBlocks(t.Lines)
	r := renderTerminal()
	for i, b := range blocks {
		lb := views.LogBlock{First: b.recs[0], AfterSeq: after, LastSeq: b.recs[len(b.recs)-1].Seq, From: line,
			Lines: r.HTMLLines(b.text())}
		// The last block may go on in records not written yet: the page
		// fetches it again with them. Not when it fills a whole page,
		// which it would again and again.
		lb.Open = i == len(blocks)-1 && b.open() && !(t.More && i == 0)
		p.Blocks = append(p.Blocks, lb)
		line += len(lb.Lines)
		after = lb.LastSeq
	}
	return p
}

// logSearchHits is how many matching records a transcript search lists.
const logSearchHits = 50

// runLogSearch renders the transcript lines of the run matching ?q=.
func (s *Server) runLogSearch(c *fiber.Ctx) error {
	q := strings.TrimSpace(c.Query("q"))
	if err := searchText("q", q, 200); err != nil {
		return s.pageError(c, err)
	}
	var hits []*spec.TranscriptLine
	if q != "" {
		var err error
		if hits, err = s.db.SearchTranscripts(c.UserContext(), userOf(c).ID, c.Params("id"), q, logSearchHits); err != nil {
			return s.pageError(c, err)
		}
	}
	return s.render(c, fiber.StatusOK, views.LogSearchResults(c.Params("id"), q, hits, logSearchHits))
}

// controlDone finishes a control POST: 303 back to the run on success; on a
// refused action the run page again, with the message above the controls
// and the error's status.
func (s *Server) controlDone(c *fiber.Ctx, err error, done string) error {
	id := c.Params("id")
	if err == nil {
		return c.Redirect("/runs/"+id+"?done="+done, fiber.StatusSeeOther)
	}
	code := spec.ErrorCode(err)
	if code == spec.EINTERNAL || code == spec.ENOTFOUND {
		return s.pageError(c, err)
	}
	v, verr := s.runView(c, id, partPage)
	if verr != nil {
		return s.pageError(c, verr)
	}
	v.Error, v.ErrorField = spec.ErrorMessage(err), spec.ErrorField(err)
	return s.render(c, HTTPStatus(err), views.RunPage(v))
}

func (s *Server) cancelRun(c *fiber.Ctx) error {
	_, err := s.engine.Cancel(c.UserContext(), userOf(c).ID, c.Params("id"))
	return s.controlDone(c, err, "canceled")
}

func (s *Server) continueRun(c *fiber.Ctx) error {
	fe := formErrors{}
	b := budgetsFromForm(fe, strings.TrimSpace(c.FormValue("max_iterations")), strings.TrimSpace(c.FormValue("max_minutes")),
		strings.TrimSpace(c.FormValue("max_cost_usd")), strings.TrimSpace(c.FormValue("max_tokens")))
	for name, msg := range fe {
		return s.controlDone(c, spec.FieldError(name, "%s", msg), "")
	}
	var raise *spec.Budgets
	if b != (spec.Budgets{}) {
		raise = &b
	}
	_, err := s.engine.Continue(c.UserContext(), userOf(c).ID, c.Params("id"), raise)
	return s.controlDone(c, err, "continued")
}

func (s *Server) respondRun(c *fiber.Ctx) error {
	var answers []string
	for _, a := range c.Request().PostArgs().PeekMulti("answer") {
		answers = append(answers, string(a))
	}
	_, err := s.engine.Respond(c.UserContext(), userOf(c).ID, c.Params("id"), answers)
	return s.controlDone(c, err, "answered")
}

func (s *Server) messageRun(c *fiber.Ctx) error {
	_, err := s.engine.Message(c.UserContext(), userOf(c).ID, c.Params("id"), c.FormValue("body"))
	return s.controlDone(c, err, "message")
}

func (s *Server) documentPage(c *fiber.Ctx) error {
	ctx := c.UserContext()
	u := userOf(c)
	var d views.DocumentData
	err := s.db.ReadTx(ctx, func(r spec.ReadStore) error {
		run, err := r.FindRun(ctx, u.ID, c.Params("id"))
		if err != nil {
			return err
		}
		doc, err := r.FindDocument(ctx, u.ID, c.Params("doc"))
		if err == nil && doc.RunID != run.ID {
			err = spec.Errorf(spec.ENOTFOUND, "Document not found.")
		}
		if err != nil {
			return err
		}
		title := doc.Title
		if title == "" {
			title = doc.Path
		}
		d = views.DocumentData{Page: s.pageFrom(c, r, title), Run: run, Doc: doc}
		return nil
	})
	if err != nil {
		return s.pageError(c, err)
	}
	d.HTML = renderMarkdown().HTML(d.Doc.Content)
	return s.render(c, fiber.StatusOK, views.DocumentPage(d))
}

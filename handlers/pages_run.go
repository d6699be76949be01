package handlers

import (
	"encoding/json"
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

// runView loads everything the run page shows. Another user's run is
// ENOTFOUND.
func (s *Server) runView(c *fiber.Ctx, runID string) (views.RunView, error) {
	ctx := c.UserContext()
	u := userOf(c)
	// The cursors are read before the run, so that an event committed while
	// the page is assembled is replayed by the live streams, never skipped.
	page := s.page(c, "")
	lastSeq, err := s.db.LastSeq(ctx, runID)
	if err != nil {
		return views.RunView{}, err
	}
	run, err := s.db.FindRun(ctx, u.ID, runID)
	if err != nil {
		return views.RunView{}, err
	}
	page.Title = run.Objective
	if r := []rune(page.Title); len(r) > 60 {
		page.Title = string(r[:59]) + "…"
	}
	v := views.RunView{Page: page, Run: run, LastSeq: lastSeq, Now: s.db.Now()}
	if v.Config, err = engine.RunConfig(run); err != nil {
		s.log.Warn("run config", "run", run.ID, "err", err)
		v.Config = nil
	}
	iters, err := s.db.ListIterations(ctx, u.ID, run.ID)
	if err != nil {
		return v, err
	}
	seen := map[string]bool{}
	for _, it := range iters {
		iv := iterationView(it)
		v.Iterations = append(v.Iterations, iv)
		for _, r := range iv.Created {
			if k := r.Type + r.ID; !seen[k] {
				seen[k] = true
				v.Created = append(v.Created, r)
			}
		}
		for _, r := range iv.Updated {
			if k := r.Type + r.ID; !seen[k] {
				seen[k] = true
				v.Updated = append(v.Updated, r)
			}
		}
	}
	if rep := reportOf(run); rep.Title != "" || rep.Status != "" {
		v.Report = &rep
		v.ReportHTML = renderMarkdown().HTML(rep.Summary)
		if len(v.Created) == 0 && len(v.Updated) == 0 {
			v.Created, v.Updated = rep.WhatChanged.Created, rep.WhatChanged.Updated
		}
	}
	if run.StopReason != nil && len(run.StopReason.Evidence) > 0 {
		var ev views.Evidence
		if json.Unmarshal(run.StopReason.Evidence, &ev) == nil && ev.Breaker != "" {
			v.Evidence = &ev
		}
	}
	docs, err := s.db.ListRunDocuments(ctx, u.ID, run.ID)
	if err != nil {
		return v, err
	}
	v.Tree = docTree(docs)
	v.Scratchpad, v.Branch = scratchpadAndBranch(docs)
	if v.Tasks, err = s.db.ListTasks(ctx, u.ID, run.ID); err != nil {
		return v, err
	}
	if run.ParentRunID != "" {
		v.Parent, _ = s.db.FindRun(ctx, u.ID, run.ParentRunID)
	}
	if v.Children, err = s.db.ListChildRuns(ctx, u.ID, run.ID); err != nil {
		return v, err
	}
	if v.Events, err = s.db.ListRunEvents(ctx, u.ID, run.ID, max(0, v.LastSeq-modalEvents), modalEvents); err != nil {
		return v, err
	}
	return v, nil
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
	var rep spec.Report
	if len(r.Report) > 0 {
		json.Unmarshal(r.Report, &rep)
	}
	return rep
}

func (s *Server) runPage(c *fiber.Ctx) error {
	// Opening a run reads its notifications, before the layout counts them.
	// An unknown run changes nothing and is a 404 below.
	if _, err := s.db.MarkRunNotificationsRead(c.UserContext(), userOf(c).ID, c.Params("id")); err != nil {
		return s.pageError(c, err)
	}
	v, err := s.runView(c, c.Params("id"))
	if err != nil {
		return s.pageError(c, err)
	}
	v.Flash = flashText(c.Query("done"))
	return s.render(c, fiber.StatusOK, views.RunPage(v))
}

// runFragment renders one live part of the run page.
func (s *Server) runFragment(c *fiber.Ctx, part func(views.RunView) templ.Component) error {
	v, err := s.runView(c, c.Params("id"))
	if err != nil {
		return s.pageError(c, err)
	}
	return s.render(c, fiber.StatusOK, part(v))
}

func (s *Server) runLive(c *fiber.Ctx) error     { return s.runFragment(c, views.RunLive) }
func (s *Server) runControls(c *fiber.Ctx) error { return s.runFragment(c, views.RunControls) }
func (s *Server) runModal(c *fiber.Ctx) error    { return s.runFragment(c, views.LiveModalBody) }
func (s *Server) runStream(c *fiber.Ctx) error   { return s.runFragment(c, views.RunStream) }

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
	v, verr := s.runView(c, id)
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
	run, err := s.db.FindRun(ctx, u.ID, c.Params("id"))
	if err != nil {
		return s.pageError(c, err)
	}
	doc, err := s.db.FindDocument(ctx, u.ID, c.Params("doc"))
	if err == nil && doc.RunID != run.ID {
		err = spec.Errorf(spec.ENOTFOUND, "Document not found.")
	}
	if err != nil {
		return s.pageError(c, err)
	}
	title := doc.Title
	if title == "" {
		title = doc.Path
	}
	return s.render(c, fiber.StatusOK, views.DocumentPage(views.DocumentData{
		Page: s.page(c, title), Run: run, Doc: doc, HTML: renderMarkdown().HTML(doc.Content),
	}))
}

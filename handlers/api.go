package handlers

import (
	"context"
	"strings"

	"github.com/gofiber/fiber/v2"

	"homework/engine"
	"homework/engine/spec"
)

// apiRoutes registers the JSON API under /api. Every route is already
// authenticated by requireAPIUser and scoped to the caller: another user's
// run, document or notification is 404, exactly like a missing one.
func (s *Server) apiRoutes(api fiber.Router) {
	api.Get("/me", func(c *fiber.Ctx) error {
		u := userOf(c)
		return c.JSON(fiber.Map{"id": u.ID, "email": u.Email, "is_admin": u.IsAdmin})
	})

	api.Post("/runs", s.apiCreateRun)
	api.Get("/runs", s.apiListRuns)
	api.Get("/runs/:id", s.apiGetRun)
	api.Post("/runs/:id/cancel", s.apiCancelRun)
	api.Post("/runs/:id/continue", s.apiContinueRun)
	api.Post("/runs/:id/respond", s.apiRespondRun)
	api.Post("/runs/:id/message", s.apiMessageRun)
	api.Get("/runs/:id/events", s.apiRunEvents)
	api.Get("/runs/:id/documents", s.apiRunDocuments)
	s.transcriptRoutes(api)
	api.Get("/events", s.apiUserEvents)

	api.Get("/documents/:id", s.apiGetDocument)
	api.Get("/search", s.apiSearch)

	api.Get("/notifications", s.apiListNotifications)
	api.Post("/notifications/read-all", s.apiReadAllNotifications)
	api.Post("/notifications/:id/read", s.apiReadNotification)

	api.Get("/mcp/servers", s.apiMCPServers)

	s.statsRoutes(api)
	s.webhookRoutes(api)
}

// apiCreateRun handles POST /api/runs: the body is a spec.Config. It answers
// 201 with {"run_id","status","url"} and a Location header.
func (s *Server) apiCreateRun(c *fiber.Ctx) error {
	var cfg spec.Config
	if err := decodeJSON(c, &cfg, false); err != nil {
		return s.jsonError(c, err)
	}
	run, err := s.engine.CreateRun(c.UserContext(), userOf(c), cfg)
	if err != nil {
		return s.jsonError(c, err)
	}
	c.Location("/api/runs/" + run.ID)
	return c.Status(fiber.StatusCreated).JSON(fiber.Map{"run_id": run.ID, "status": run.Status, "url": "/runs/" + run.ID})
}

// apiListRuns handles GET /api/runs: the caller's runs, filtered and
// ordered as runFilterQuery reads them (newest first by default), one page
// at a time.
func (s *Server) apiListRuns(c *fiber.Ctx) error {
	_, f, err := runFilterQuery(c)
	if err != nil {
		return s.jsonError(c, err)
	}
	limit, err := queryInt(c, "limit", 50, 1, 200)
	if err != nil {
		return s.jsonError(c, err)
	}
	f.Limit = int(limit)
	page, err := s.db.ListRuns(c.UserContext(), userOf(c).ID, f)
	if err != nil {
		return s.jsonError(c, err)
	}
	out := RunList{Runs: make([]*RunJSON, 0, len(page.Runs))}
	for _, r := range page.Runs {
		out.Runs = append(out.Runs, runJSON(r))
	}
	if page.NextCursor != "" {
		out.NextCursor = &page.NextCursor
	}
	return c.JSON(out)
}

// apiGetRun handles GET /api/runs/{id}?include=iterations,workspace.
func (s *Server) apiGetRun(c *fiber.Ctx) error {
	var withIterations, withWorkspace bool
	if inc := c.Query("include"); inc != "" {
		for _, part := range strings.Split(inc, ",") {
			switch strings.TrimSpace(part) {
			case "iterations":
				withIterations = true
			case "workspace":
				withWorkspace = true
			case "":
			default:
				return s.jsonError(c, spec.FieldError("include", "Unknown include %q; use iterations and/or workspace.", part))
			}
		}
	}
	ctx := c.UserContext()
	u := userOf(c)
	// The run, its iterations and its workspace are of one snapshot.
	var run *spec.Run
	var its []*spec.Iteration
	var docs []*spec.Document
	var tasks []*spec.Task
	var forecast *spec.Forecast
	err := s.db.ReadTx(ctx, func(r spec.ReadStore) error {
		var err error
		if run, err = r.FindRun(ctx, u.ID, c.Params("id")); err != nil {
			return err
		}
		if forecast, err = runForecast(ctx, r, run); err != nil {
			return err
		}
		if withIterations {
			if its, err = r.ListIterations(ctx, u.ID, run.ID); err != nil {
				return err
			}
		}
		if withWorkspace {
			if docs, err = r.ListRunDocuments(ctx, u.ID, run.ID); err != nil {
				return err
			}
			if tasks, err = r.ListTasks(ctx, u.ID, run.ID); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return s.jsonError(c, err)
	}
	out := runJSON(run)
	out.Forecast = forecast
	if withIterations {
		list := make([]IterationJSON, 0, len(its))
		for _, it := range its {
			list = append(list, iterationJSON(it))
		}
		out.Iterations = &list
	}
	if withWorkspace {
		ws := &WorkspaceJSON{RootDocumentID: run.WorkspaceDocID, Documents: make([]DocumentJSON, 0, len(docs)), Tasks: make([]TaskJSON, 0, len(tasks))}
		for _, d := range docs {
			ws.Documents = append(ws.Documents, documentJSON(d, false))
		}
		for _, t := range tasks {
			ws.Tasks = append(ws.Tasks, taskJSON(t))
		}
		out.Workspace = ws
	}
	return c.JSON(out)
}

// apiCancelRun handles POST /api/runs/{id}/cancel.
func (s *Server) apiCancelRun(c *fiber.Ctx) error {
	run, err := s.engine.Cancel(c.UserContext(), userOf(c).ID, c.Params("id"))
	return s.runResult(c, run, err)
}

// apiContinueRun handles POST /api/runs/{id}/continue with an optional body
// {"budgets":{...}} raising the run's budgets.
func (s *Server) apiContinueRun(c *fiber.Ctx) error {
	var body struct {
		Budgets *spec.Budgets `json:"budgets"`
	}
	if err := decodeJSON(c, &body, true); err != nil {
		return s.jsonError(c, err)
	}
	run, err := s.engine.Continue(c.UserContext(), userOf(c).ID, c.Params("id"), body.Budgets)
	return s.runResult(c, run, err)
}

// apiRespondRun handles POST /api/runs/{id}/respond with {"answers":[...]}
// or {"answer":"..."}.
func (s *Server) apiRespondRun(c *fiber.Ctx) error {
	var body struct {
		Answers []string `json:"answers"`
		Answer  string   `json:"answer"`
	}
	if err := decodeJSON(c, &body, false); err != nil {
		return s.jsonError(c, err)
	}
	answers := body.Answers
	if body.Answer != "" {
		answers = append([]string{body.Answer}, answers...)
	}
	run, err := s.engine.Respond(c.UserContext(), userOf(c).ID, c.Params("id"), answers)
	return s.runResult(c, run, err)
}

// apiMessageRun handles POST /api/runs/{id}/message with {"body":"..."}.
func (s *Server) apiMessageRun(c *fiber.Ctx) error {
	var body struct {
		Body string `json:"body"`
	}
	if err := decodeJSON(c, &body, false); err != nil {
		return s.jsonError(c, err)
	}
	run, err := s.engine.Message(c.UserContext(), userOf(c).ID, c.Params("id"), body.Body)
	return s.runResult(c, run, err)
}

// runResult answers an action on a run with the run as it is now.
func (s *Server) runResult(c *fiber.Ctx, run *spec.Run, err error) error {
	if err != nil {
		return s.jsonError(c, err)
	}
	return c.JSON(runJSON(run))
}

// apiRunDocuments handles GET /api/runs/{id}/documents: the run's workspace
// tree without content.
func (s *Server) apiRunDocuments(c *fiber.Ctx) error {
	docs, err := s.db.ListRunDocuments(c.UserContext(), userOf(c).ID, c.Params("id"))
	if err != nil {
		return s.jsonError(c, err)
	}
	out := make([]DocumentJSON, 0, len(docs))
	for _, d := range docs {
		out = append(out, documentJSON(d, false))
	}
	return c.JSON(fiber.Map{"documents": out})
}

// apiGetDocument handles GET /api/documents/{id}: one document with content.
func (s *Server) apiGetDocument(c *fiber.Ctx) error {
	doc, err := s.db.FindDocument(c.UserContext(), userOf(c).ID, c.Params("id"))
	if err != nil {
		return s.jsonError(c, err)
	}
	return c.JSON(documentJSON(doc, true))
}

// apiSearch handles GET /api/search?q=&run_id=&limit=: full-text search over
// the caller's documents, best matches first.
func (s *Server) apiSearch(c *fiber.Ctx) error {
	q := strings.TrimSpace(c.Query("q"))
	if q == "" {
		return s.jsonError(c, spec.FieldError("q", "Search query is empty."))
	}
	if err := searchText("q", q, 1000); err != nil {
		return s.jsonError(c, err)
	}
	limit, err := queryInt(c, "limit", 20, 1, 100)
	if err != nil {
		return s.jsonError(c, err)
	}
	ctx := c.UserContext()
	u := userOf(c)
	runID := c.Query("run_id")
	if runID != "" {
		if _, err := s.db.FindRun(ctx, u.ID, runID); err != nil {
			return s.jsonError(c, err)
		}
	}
	hits, err := s.db.SearchDocuments(ctx, u.ID, runID, q, int(limit))
	if err != nil {
		return s.jsonError(c, err)
	}
	out := make([]SearchHitJSON, 0, len(hits))
	for _, h := range hits {
		out = append(out, SearchHitJSON{DocumentJSON: documentJSON(h.Document, false), Snippet: h.Snippet})
	}
	return c.JSON(fiber.Map{"query": q, "results": out})
}

// apiListNotifications handles GET /api/notifications?cursor=&limit=: the
// caller's notifications newest first, with the unread count.
func (s *Server) apiListNotifications(c *fiber.Ctx) error {
	limit, err := queryInt(c, "limit", 50, 1, 100)
	if err != nil {
		return s.jsonError(c, err)
	}
	before, err := queryInt(c, "cursor", 0, 1, 1<<62)
	if err != nil {
		return s.jsonError(c, err)
	}
	ctx := c.UserContext()
	u := userOf(c)
	var ns []*spec.Notification
	var unread int
	err = s.db.ReadTx(ctx, func(r spec.ReadStore) error {
		if ns, err = r.ListNotifications(ctx, u.ID, before, int(limit)+1); err != nil {
			return err
		}
		unread, err = r.CountUnread(ctx, u.ID)
		return err
	})
	if err != nil {
		return s.jsonError(c, err)
	}
	out := NotificationList{Notifications: make([]NotificationJSON, 0, len(ns)), Unread: unread}
	if len(ns) > int(limit) {
		ns = ns[:limit]
		next := itoa(ns[len(ns)-1].ID)
		out.NextCursor = &next
	}
	for _, n := range ns {
		out.Notifications = append(out.Notifications, notificationJSON(n))
	}
	return c.JSON(out)
}

// apiReadNotification handles POST /api/notifications/{id}/read.
func (s *Server) apiReadNotification(c *fiber.Ctx) error {
	id, err := parseID(c.Params("id"))
	if err != nil {
		return s.jsonError(c, spec.Errorf(spec.ENOTFOUND, "Notification not found."))
	}
	return s.markRead(c, id)
}

// apiReadAllNotifications handles POST /api/notifications/read-all.
func (s *Server) apiReadAllNotifications(c *fiber.Ctx) error {
	return s.markRead(c, 0)
}

func (s *Server) markRead(c *fiber.Ctx, id int64) error {
	ctx := c.UserContext()
	u := userOf(c)
	if err := s.db.MarkNotificationRead(ctx, u.ID, id); err != nil {
		return s.jsonError(c, err)
	}
	unread, err := s.db.CountUnread(ctx, u.ID)
	if err != nil {
		return s.jsonError(c, err)
	}
	return c.JSON(fiber.Map{"unread": unread})
}

// budgetsOf returns the run's configured budgets, or nil when its stored
// configuration cannot be read.
func budgetsOf(r *spec.Run) *spec.Budgets {
	cfg, err := engine.RunConfig(r)
	if err != nil {
		return nil
	}
	return &cfg.Budgets
}

// tagsOf returns the run's tags from its stored configuration, never nil.
func tagsOf(r *spec.Run) []string {
	cfg, err := engine.RunConfig(r)
	if err != nil || cfg.Tags == nil {
		return []string{}
	}
	return cfg.Tags
}

// runForecast is the forecast of the run's next iteration, or nil for a
// run that has ended for good (completed, canceled, failed).
func runForecast(ctx context.Context, r spec.UsageReads, run *spec.Run) (*spec.Forecast, error) {
	if spec.IsTerminalStatus(run.Status) {
		return nil, nil
	}
	cfg, err := engine.RunConfig(run)
	if err != nil {
		return nil, err
	}
	return engine.ForecastNext(ctx, r, run, cfg)
}

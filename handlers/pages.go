package handlers

import (
	"errors"
	"strconv"
	"strings"
	"sync"

	"homework/engine/spec"

	"github.com/gofiber/fiber/v2"

	"homework/views"
)

// renderMarkdown is the shared document renderer; goldmark and bluemonday
// are safe for concurrent use once built.
var renderMarkdown = sync.OnceValue(newMarkdown)

// pageRoutes registers the HTML pages. Every page but /login and /setup
// needs a signed-in session; POSTs need its CSRF token.
func (s *Server) pageRoutes(app *fiber.App) {
	s.sessionRoutes(app)
	auth := s.requirePageUser
	app.Get("/", auth, s.runList)
	app.Get("/runs", s.runsToList)
	app.Get("/runs/fragment", auth, s.noStore, s.runListFragment)
	app.Get("/runs/new", auth, s.composer)
	app.Get("/runs/new/price", auth, s.noStore, s.composerPrice)
	app.Post("/runs", auth, s.createRun)
	app.Post("/runs/bulk", auth, s.bulkRuns)
	app.Get("/runs/:id", auth, s.runPage)
	app.Get("/runs/:id/live", auth, s.noStore, s.runLive)
	app.Get("/runs/:id/controls", auth, s.noStore, s.runControls)
	app.Get("/runs/:id/modal", auth, s.noStore, s.runModal)
	app.Get("/runs/:id/answer", auth, s.noStore, s.runAnswer)
	app.Get("/runs/:id/work", auth, s.noStore, s.runWork)
	app.Get("/runs/:id/timeline", auth, s.noStore, s.runTimeline)
	app.Get("/runs/:id/iterations/:n/log", auth, s.noStore, s.runLog)
	app.Get("/runs/:id/log-search", auth, s.noStore, s.runLogSearch)
	s.runHistoryRoutes(app, auth)
	app.Get("/runs/:id/documents/:doc", auth, s.documentPage)
	app.Post("/runs/:id/cancel", auth, s.cancelRun)
	app.Post("/runs/:id/continue", auth, s.continueRun)
	app.Post("/runs/:id/respond", auth, s.respondRun)
	app.Post("/runs/:id/message", auth, s.messageRun)
	app.Get("/notifications", auth, s.notifications)
	app.Get("/notifications/count", auth, s.noStore, s.unreadCount)
	app.Post("/notifications/read-all", auth, s.readAllNotifications)
	app.Post("/notifications/:nid/read", auth, s.readNotification)
	app.Get("/reports", auth, s.reports)
	s.tokenRoutes(app, auth)
}

// noStore keeps live fragments out of caches.
func (s *Server) noStore(c *fiber.Ctx) error {
	c.Set(fiber.HeaderCacheControl, "no-store")
	return c.Next()
}

// pageError renders err as a readable error page with its status; internal
// errors are logged and shown generically.
func (s *Server) pageError(c *fiber.Ctx, err error) error {
	var fe *fiber.Error
	if errors.As(err, &fe) {
		return s.renderError(c, fe.Code, fe.Message)
	}
	if spec.ErrorCode(err) == spec.EINTERNAL {
		s.log.Error("page error", "method", c.Method(), "path", c.Path(), "err", err)
	}
	return s.renderError(c, HTTPStatus(err), spec.ErrorMessage(err))
}

// runListData loads the run list for the request's filters and cursor.
func (s *Server) runListData(c *fiber.Ctx) (views.RunListData, error) {
	u := userOf(c)
	ctx := c.UserContext()
	d := views.RunListData{MaxRunning: s.opts.MaxRunsPerUser, Cursor: c.Query("cursor")}
	var f spec.RunFilter
	var err error
	if d.Filter, f, err = runFilterQuery(c); err != nil {
		return d, err
	}
	d.Status = d.Filter.Status
	f.Limit = 25
	if f.Query != "" {
		// A query matches documents too, and the SQLite store indexes
		// iteration summaries later than it writes them: what waits is
		// indexed first, so the search finds every summary written before it.
		// Indexing needs the writer; when it cannot have it, the list
		// searches what is indexed rather than fail.
		if ip, ok := s.db.(spec.SearchIndexer); ok {
			if err := ip.IndexPending(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("index waiting summaries before a search", "err", err)
			}
		}
	}
	// The list, the counts and the feed cursor are of one snapshot.
	err = s.db.ReadTx(ctx, func(r spec.ReadStore) error {
		d.Page = s.pageFrom(c, r, "Runs")
		page, err := r.ListRuns(ctx, u.ID, f)
		if err != nil {
			return err
		}
		d.Runs, d.NextCursor = page.Runs, page.NextCursor
		d.Counts, err = r.CountRunsByStatus(ctx, u.ID)
		return err
	})
	if err != nil {
		return d, err
	}
	d.Running, d.Queued = d.Counts[spec.StatusRunning], d.Counts[spec.StatusQueued]
	return d, nil
}

func (s *Server) runList(c *fiber.Ctx) error {
	d, err := s.runListData(c)
	if err != nil {
		return s.pageError(c, err)
	}
	d.Flash = flashText(c.Query("done"))
	return s.render(c, fiber.StatusOK, views.RunList(d))
}

// runsToList sends /runs, where a person (or a link) looks for the run
// list, to the run list at /, with its filters.
func (s *Server) runsToList(c *fiber.Ctx) error {
	to := "/"
	if q := c.Request().URI().QueryString(); len(q) > 0 {
		to += "?" + string(q)
	}
	return c.Redirect(to, fiber.StatusFound)
}

func (s *Server) runListFragment(c *fiber.Ctx) error {
	d, err := s.runListData(c)
	if err != nil {
		return s.pageError(c, err)
	}
	return s.render(c, fiber.StatusOK, views.RunListFragment(d))
}

// unreadCount answers the header's count. On a run's page it is asked with
// ?viewing=RUN_ID: the person is looking at that run, so its notifications
// (a new one is what made the count refresh) are read first. An id that is
// not one of the user's runs marks nothing.
func (s *Server) unreadCount(c *fiber.Ctx) error {
	u := userOf(c)
	viewing := c.Query("viewing")
	// Only the page's own refresh (htmx sends HX-Request, which a link
	// from another site cannot) marks anything read, and only when the
	// run has unread notifications: a refresh is otherwise a read.
	if viewing != "" && (len(viewing) > 64 || c.Get("HX-Request") != "true") {
		viewing = ""
	}
	if viewing != "" {
		n, err := s.db.CountRunUnread(c.UserContext(), u.ID, viewing)
		if err != nil && spec.ErrorCode(err) != spec.ENOTFOUND {
			return s.pageError(c, err)
		}
		if n > 0 {
			if _, err := s.db.MarkRunNotificationsRead(c.UserContext(), u.ID, viewing); err != nil && spec.ErrorCode(err) != spec.ENOTFOUND {
				return s.pageError(c, err)
			}
		}
	}
	n, err := s.db.CountUnread(c.UserContext(), u.ID)
	if err != nil {
		return s.pageError(c, err)
	}
	return s.render(c, fiber.StatusOK, views.UnreadCountFor(n, viewing))
}

func (s *Server) notifications(c *fiber.Ctx) error {
	u := userOf(c)
	before, _ := strconv.ParseInt(c.Query("before"), 10, 64)
	const limit = 50
	var d views.NotificationsData
	err := s.db.ReadTx(c.UserContext(), func(r spec.ReadStore) error {
		items, err := r.ListNotifications(c.UserContext(), u.ID, before, limit)
		if err != nil {
			return err
		}
		d = views.NotificationsData{Page: s.pageFrom(c, r, "Notifications"), Items: items, Groups: views.GroupNotifications(items)}
		for _, g := range d.Groups {
			if g.RunID == "" {
				continue
			}
			run, err := r.FindRun(c.UserContext(), u.ID, g.RunID)
			if err != nil && spec.ErrorCode(err) != spec.ENOTFOUND {
				return err
			}
			g.Run = run
		}
		return nil
	})
	if err != nil {
		return s.pageError(c, err)
	}
	if items := d.Items; len(items) == limit {
		d.Before = items[len(items)-1].ID
	}
	return s.render(c, fiber.StatusOK, views.Notifications(d))
}

func (s *Server) readNotification(c *fiber.Ctx) error {
	id, err := strconv.ParseInt(c.Params("nid"), 10, 64)
	if err != nil || id <= 0 {
		return s.renderError(c, fiber.StatusNotFound, "Notification not found.")
	}
	if err := s.db.MarkNotificationRead(c.UserContext(), userOf(c).ID, id); err != nil {
		return s.pageError(c, err)
	}
	return c.Redirect("/notifications", fiber.StatusSeeOther)
}

func (s *Server) readAllNotifications(c *fiber.Ctx) error {
	if err := s.db.MarkNotificationRead(c.UserContext(), userOf(c).ID, 0); err != nil {
		return s.pageError(c, err)
	}
	return c.Redirect("/notifications", fiber.StatusSeeOther)
}

func (s *Server) reports(c *fiber.Ctx) error {
	var page *spec.RunPage
	var d views.ReportsData
	var whatIf func()
	// The list, the layout and the report's figures are of one snapshot.
	err := s.db.ReadTx(c.UserContext(), func(r spec.ReadStore) error {
		var err error
		if page, err = r.ListReports(c.UserContext(), userOf(c).ID, c.Query("cursor"), 25); err != nil {
			return err
		}
		d.Page = s.pageFrom(c, r, "Reports")
		d.Effect, whatIf = s.effectData(c, r)
		return nil
	})
	if err != nil {
		return s.pageError(c, err)
	}
	if whatIf != nil {
		whatIf()
	}
	d.NextCursor = page.NextCursor
	for _, r := range page.Runs {
		title := reportOf(r).Title
		if strings.TrimSpace(title) == "" {
			title = r.Objective
		}
		d.Rows = append(d.Rows, views.ReportRow{Run: r, Title: title})
	}
	status := fiber.StatusOK
	if d.Effect.Error != "" || d.Effect.WhatIfError != "" {
		status = fiber.StatusBadRequest
	}
	return s.render(c, status, views.Reports(d))
}

// flashText returns the confirmation for a ?done= key; unknown keys show
// nothing, so the query cannot inject text.
func flashText(key string) string {
	return map[string]string{
		"canceled":  "Run canceled.",
		"continued": "Run continued.",
		"answered":  "Answer sent; the run resumes.",
		"message":   "Message queued for the next iteration.",
		"created":   "Run started. It works in the background; you get a notification when it is done.",
	}[key]
}

package handlers

import (
	"strings"

	"github.com/gofiber/fiber/v2"

	"homework/engine/spec"
	"homework/views"
)

// maxBulkRuns bounds how many runs one bulk action may name: a page of the
// run list is 25, so this is several pages' worth of select-all.
const maxBulkRuns = 200

// maxRunIDLen is longer than any run id (a UUID is 36 characters).
const maxRunIDLen = 64

// bulkRuns handles POST /runs/bulk from the run list's bulk bar:
//
//	action      cancel | continue
//	ids         the selected runs (repeated)
//	max_*       for continue, the raised budgets (as the run page's Continue)
//	confirm     "1" once the person has confirmed; without it the answer is
//	            a confirmation page listing the runs (the no-JavaScript path;
//	            list.js asks in a dialog and sends confirm=1 at once)
//
// Each run is acted on by itself, in its own transaction, so one refusal
// leaves the others' outcomes standing; the answer lists every run's
// outcome. A bad request as a whole (no or too many runs, an unknown
// action, a budget that is not a number) acts on none and says why.
func (s *Server) bulkRuns(c *fiber.Ctx) error {
	d := views.BulkData{Action: c.FormValue("action")}
	var ids []string
	seen := map[string]bool{}
	badID := false
	for _, b := range c.Request().PostArgs().PeekMulti("ids") {
		id := strings.TrimSpace(string(b))
		if id == "" || seen[id] {
			continue
		}
		if !plainText(id) {
			badID = true
			break
		}
		seen[id] = true
		ids = append(ids, id)
		if len(ids) > maxBulkRuns {
			break // enough to refuse; the rest is not read
		}
	}
	d.Budgets = views.BulkBudgets{
		MaxIterations: strings.TrimSpace(c.FormValue("max_iterations")),
		MaxMinutes:    strings.TrimSpace(c.FormValue("max_minutes")),
		MaxCostUSD:    strings.TrimSpace(c.FormValue("max_cost_usd")),
		MaxTokens:     strings.TrimSpace(c.FormValue("max_tokens")),
	}
	fe := formErrors{}
	b := budgetsFromForm(fe, d.Budgets.MaxIterations, d.Budgets.MaxMinutes, d.Budgets.MaxCostUSD, d.Budgets.MaxTokens)
	switch {
	case d.Action != "cancel" && d.Action != "continue":
		d.Error = "Choose Cancel selected or Continue selected."
	case badID:
		d.Error = "One of the selected ids is not a run id (it holds control characters or is not text); select the runs again."
	case len(ids) == 0:
		d.Error = "Select at least one run first: tick the box in its row."
	case len(ids) > maxBulkRuns:
		d.Error = "That is more than " + itoa(maxBulkRuns) + " runs at once; select fewer and try again."
	case d.Action == "continue" && len(fe) > 0:
		for _, name := range []string{"max_iterations", "max_minutes", "max_cost_usd", "max_tokens"} {
			if msg, ok := fe[name]; ok {
				d.Error = bulkBudgetLabel[name] + ": " + msg
				break
			}
		}
	case d.Action == "continue" && b == (spec.Budgets{}):
		d.Error = "Enter at least one raised budget to continue the selected runs with."
	}
	u := userOf(c)
	ctx := c.UserContext()
	d.Page = s.page(c, "Selected runs")
	if d.Error != "" {
		return s.render(c, fiber.StatusBadRequest, views.BulkPage(d))
	}
	if c.FormValue("confirm") != "1" {
		// Name the runs being asked about; unknown ones (another user's
		// included) are listed as such and refused when confirmed.
		err := s.db.ReadTx(ctx, func(r spec.ReadStore) error {
			for _, id := range ids {
				res := views.BulkResult{ID: id}
				if len(id) > maxRunIDLen {
					res.Reason = "Not found: no run of yours has this id."
					d.Results = append(d.Results, res)
					continue
				}
				run, err := r.FindRun(ctx, u.ID, id)
				switch {
				case err == nil:
					res.Run = run
				case spec.ErrorCode(err) == spec.ENOTFOUND:
					res.Reason = "Not found: no run of yours has this id."
				default:
					return err
				}
				d.Results = append(d.Results, res)
			}
			return nil
		})
		if err != nil {
			return s.pageError(c, err)
		}
		d.Confirm = true
		return s.render(c, fiber.StatusOK, views.BulkPage(d))
	}
	for _, id := range ids {
		res := views.BulkResult{ID: id}
		if len(id) > maxRunIDLen {
			// No run has such an id; do not send it to the database.
			res.Reason = "Not found: no run of yours has this id."
			d.Results = append(d.Results, res)
			continue
		}
		var run *spec.Run
		var err error
		if d.Action == "cancel" {
			run, err = s.engine.Cancel(ctx, u.ID, id)
		} else {
			raise := b
			run, err = s.engine.Continue(ctx, u.ID, id, &raise)
		}
		code := spec.ErrorCode(err)
		switch {
		case err == nil:
			res.Run, res.Done = run, true
		case code == spec.ENOTFOUND:
			res.Reason = "Not found: no run of yours has this id."
		case code == spec.EINTERNAL:
			s.log.Error("bulk action", "action", d.Action, "run", id, "err", err)
			res.Reason = "Something went wrong on the server; nothing was changed for this run. Try again."
		default:
			res.Reason = spec.ErrorMessage(err)
		}
		if res.Run == nil && code != spec.ENOTFOUND {
			// Name the run in its refusal.
			res.Run, _ = s.db.FindRun(ctx, u.ID, id)
		}
		d.Results = append(d.Results, res)
	}
	return s.render(c, fiber.StatusOK, views.BulkPage(d))
}

var bulkBudgetLabel = map[string]string{
	"max_iterations": "Iterations", "max_minutes": "Minutes", "max_cost_usd": "Cost (USD)", "max_tokens": "Tokens",
}

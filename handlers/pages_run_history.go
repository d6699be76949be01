package handlers

import (
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"

	"homework/engine/spec"
	"homework/views"
)

// eventPage is how many events one page of a run's event history lists.
const eventPage = 50

// Lineage bounds: how many ancestors the run page names, how many
// follow-ups of the run and of each follow-up it lists.
const (
	lineageAncestors   = 5
	lineageChildren    = 20
	listedChildren     = 50 // the most follow-ups ListChildRuns returns
	lineageGrandparent = 10 // the follow-ups whose own follow-ups are listed
)

// runHistoryRoutes adds the run page's lazily loaded parts: its event
// history and its lineage.
func (s *Server) runHistoryRoutes(app fiber.Router, auth fiber.Handler) {
	app.Get("/runs/:id/events", auth, s.noStore, s.runEvents)
	app.Get("/runs/:id/lineage", auth, s.noStore, s.runLineage)
}

// eventType validates the ?type= of the event history: "" (every type) or
// a known event type.
func eventType(c *fiber.Ctx) (string, error) {
	typ := c.Query("type")
	if typ == "" {
		return "", nil
	}
	for _, e := range spec.Events {
		if string(e.Type) == typ {
			return typ, nil
		}
	}
	shown := typ
	if !plainText(shown) || utf8.RuneCountInString(shown) > 40 {
		return "", spec.FieldError("type", "type must be the name of an event type, such as tool_call.")
	}
	return "", spec.FieldError("type", "There is no event type “%s”; type must be the name of one, such as tool_call.", shown)
}

// runEvents renders a page of the run's event history: newest first,
// ?type= only that type, ?before=SEQ the events before that seq.
func (s *Server) runEvents(c *fiber.Ctx) error {
	typ, err := eventType(c)
	if err != nil {
		return s.pageError(c, err)
	}
	before, err := queryInt(c, "before", 0, 1, 1<<53)
	if err != nil {
		return s.pageError(c, err)
	}
	ctx, u := c.UserContext(), userOf(c)
	h := views.EventHistory{RunID: c.Params("id"), Type: typ, Before: before}
	err = s.db.ReadTx(ctx, func(r spec.ReadStore) error {
		if h.Types, err = r.ListRunEventTypes(ctx, u.ID, h.RunID); err != nil {
			return err
		}
		h.Events, err = r.ListRunEventsBefore(ctx, u.ID, h.RunID, typ, before, eventPage+1)
		return err
	})
	if err != nil {
		return s.pageError(c, err)
	}
	if len(h.Events) > eventPage {
		h.Events = h.Events[:eventPage]
		h.Older = h.Events[eventPage-1].Seq
	}
	return s.render(c, fiber.StatusOK, views.EventHistoryBody(h))
}

// runLineage renders where the run came from (its parent and theirs, up
// to lineageAncestors) and its follow-ups two levels down.
func (s *Server) runLineage(c *fiber.Ctx) error {
	ctx, u := c.UserContext(), userOf(c)
	var l views.Lineage
	err := s.db.ReadTx(ctx, func(r spec.ReadStore) error {
		run, err := r.FindRun(ctx, u.ID, c.Params("id"))
		if err != nil {
			return err
		}
		l.Run = run
		seen := map[string]bool{run.ID: true}
		for id := run.ParentRunID; id != "" && !seen[id]; {
			if len(l.Ancestors) == lineageAncestors {
				l.MoreAncestors = true
				break
			}
			p, err := r.FindRun(ctx, u.ID, id)
			if spec.ErrorCode(err) == spec.ENOTFOUND {
				break // deleted, or not the user's: the chain ends here
			} else if err != nil {
				return err
			}
			seen[id] = true
			l.Ancestors = append([]*spec.Run{p}, l.Ancestors...)
			id = p.ParentRunID
		}
		children, err := r.ListChildRuns(ctx, u.ID, run.ID)
		if err != nil {
			return err
		}
		if len(children) > lineageChildren {
			l.MoreChildren = len(children) - lineageChildren
			// ListChildRuns returns at most listedChildren.
			l.MoreAtLeast = len(children) >= listedChildren
			children = children[:lineageChildren]
		}
		for i, ch := range children {
			n := views.LineageNode{Run: ch}
			if i < lineageGrandparent {
				if n.Children, err = r.ListChildRuns(ctx, u.ID, ch.ID); err != nil {
					return err
				}
			}
			l.Children = append(l.Children, n)
		}
		return nil
	})
	if err != nil {
		return s.pageError(c, err)
	}
	return s.render(c, fiber.StatusOK, views.LineageBody(l))
}

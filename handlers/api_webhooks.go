package handlers

import (
	"time"

	"github.com/gofiber/fiber/v2"

	"homework/engine/spec"
)

// The webhooks API: a user's endpoints and their deliveries (README,
// "Webhooks"). Another user's endpoint or delivery is 404.
func (s *Server) webhookRoutes(api fiber.Router) {
	api.Post("/webhooks", s.apiCreateWebhook)
	api.Get("/webhooks", s.apiListWebhooks)
	api.Delete("/webhooks/:id", s.apiDeleteWebhook)
	api.Post("/webhooks/:id/test", s.apiTestWebhook)
	api.Get("/webhooks/:id/deliveries", s.apiListDeliveries)
	api.Post("/webhooks/:id/deliveries/:did/redeliver", s.apiRedeliver)
}

// WebhookJSON is an endpoint in the API; Secret only in the answer to its
// creation.
type WebhookJSON struct {
	ID         int64      `json:"id"`
	URL        string     `json:"url"`
	Events     []string   `json:"events"`
	Format     string     `json:"format"`
	Secret     string     `json:"secret,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	DisabledAt *time.Time `json:"disabled_at"`
}

func webhookJSON(e *spec.WebhookEndpoint, secret bool) WebhookJSON {
	out := WebhookJSON{ID: e.ID, URL: e.URL, Events: e.Events, Format: e.Format, CreatedAt: e.CreatedAt}
	if secret {
		out.Secret = e.Secret
	}
	if !e.DisabledAt.IsZero() {
		out.DisabledAt = &e.DisabledAt
	}
	return out
}

// DeliveryJSON is a delivery in the API.
type DeliveryJSON struct {
	ID            int64      `json:"id"`
	Event         string     `json:"event"`
	RunID         string     `json:"run_id,omitempty"`
	WebhookID     string     `json:"webhook_id"`
	State         string     `json:"state"`
	Attempts      int        `json:"attempts"`
	LastStatus    int        `json:"last_status"`
	LastError     string     `json:"last_error"`
	LastResponse  string     `json:"last_response"`
	NextAttemptAt *time.Time `json:"next_attempt_at"`
	CreatedAt     time.Time  `json:"created_at"`
	UpdatedAt     time.Time  `json:"updated_at"`
}

func deliveryJSON(d *spec.WebhookDelivery) DeliveryJSON {
	out := DeliveryJSON{ID: d.ID, Event: d.Event, RunID: d.RunID, WebhookID: d.WebhookID, State: d.State, Attempts: d.Attempts,
		LastStatus: d.LastStatus, LastError: d.LastError, LastResponse: d.LastResponse, CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt}
	if !d.NextAttemptAt.IsZero() {
		out.NextAttemptAt = &d.NextAttemptAt
	}
	return out
}

type createWebhookRequest struct {
	URL    string   `json:"url"`
	Events []string `json:"events"`
	Format string   `json:"format"`
}

// apiCreateWebhook handles POST /api/webhooks {url, events?, format?}: 201
// with the endpoint and its secret, shown this once.
func (s *Server) apiCreateWebhook(c *fiber.Ctx) error {
	var req createWebhookRequest
	if err := decodeJSON(c, &req, false); err != nil {
		return s.jsonError(c, err)
	}
	if req.URL == "" {
		return s.jsonError(c, spec.FieldError("url", "A URL is required."))
	}
	ep, err := s.engine.CreateWebhook(c.UserContext(), userOf(c).ID, req.URL, req.Events, req.Format)
	if err != nil {
		return s.jsonError(c, err)
	}
	c.Location("/api/webhooks/" + itoa(ep.ID))
	return c.Status(fiber.StatusCreated).JSON(webhookJSON(ep, true))
}

// apiListWebhooks handles GET /api/webhooks: {"webhooks": [...]}, newest
// first, without secrets.
func (s *Server) apiListWebhooks(c *fiber.Ctx) error {
	eps, err := s.db.ListWebhooks(c.UserContext(), userOf(c).ID)
	if err != nil {
		return s.jsonError(c, err)
	}
	out := make([]WebhookJSON, 0, len(eps))
	for _, e := range eps {
		out = append(out, webhookJSON(e, false))
	}
	return c.JSON(fiber.Map{"webhooks": out})
}

func webhookParam(c *fiber.Ctx, name string) (int64, error) {
	id, err := parseID(c.Params(name))
	if err != nil {
		if name == "did" {
			return 0, spec.Errorf(spec.ENOTFOUND, "Delivery not found.")
		}
		return 0, spec.Errorf(spec.ENOTFOUND, "Webhook not found.")
	}
	return id, nil
}

// apiDeleteWebhook handles DELETE /api/webhooks/{id}: 204.
func (s *Server) apiDeleteWebhook(c *fiber.Ctx) error {
	id, err := webhookParam(c, "id")
	if err != nil {
		return s.jsonError(c, err)
	}
	if err := s.db.DeleteWebhook(c.UserContext(), userOf(c).ID, id); err != nil {
		return s.jsonError(c, err)
	}
	return c.SendStatus(fiber.StatusNoContent)
}

// apiTestWebhook handles POST /api/webhooks/{id}/test: a ping is queued;
// 202 with its delivery.
func (s *Server) apiTestWebhook(c *fiber.Ctx) error {
	id, err := webhookParam(c, "id")
	if err != nil {
		return s.jsonError(c, err)
	}
	d, err := s.engine.TestWebhook(c.UserContext(), userOf(c).ID, id)
	if err != nil {
		return s.jsonError(c, err)
	}
	return c.Status(fiber.StatusAccepted).JSON(deliveryJSON(d))
}

// apiListDeliveries handles GET /api/webhooks/{id}/deliveries?limit=:
// {"deliveries": [...]}, newest first.
func (s *Server) apiListDeliveries(c *fiber.Ctx) error {
	id, err := webhookParam(c, "id")
	if err != nil {
		return s.jsonError(c, err)
	}
	limit, err := queryInt(c, "limit", 50, 1, 200)
	if err != nil {
		return s.jsonError(c, err)
	}
	ds, err := s.db.ListWebhookDeliveries(c.UserContext(), userOf(c).ID, id, int(limit))
	if err != nil {
		return s.jsonError(c, err)
	}
	out := make([]DeliveryJSON, 0, len(ds))
	for _, d := range ds {
		out = append(out, deliveryJSON(d))
	}
	return c.JSON(fiber.Map{"deliveries": out})
}

// apiRedeliver handles POST /api/webhooks/{id}/deliveries/{did}/redeliver:
// the delivery is sent again with the same webhook-id; 202.
func (s *Server) apiRedeliver(c *fiber.Ctx) error {
	id, err := webhookParam(c, "id")
	if err != nil {
		return s.jsonError(c, err)
	}
	did, err := webhookParam(c, "did")
	if err != nil {
		return s.jsonError(c, err)
	}
	d, err := s.engine.RedeliverWebhook(c.UserContext(), userOf(c).ID, id, did)
	if err != nil {
		return s.jsonError(c, err)
	}
	return c.Status(fiber.StatusAccepted).JSON(deliveryJSON(d))
}

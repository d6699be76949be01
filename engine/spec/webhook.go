package spec

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/base64"
	"strings"
	"time"
)

// Webhook event types: what a run's status change is called to the
// person's systems, and the ping of a test.
const (
	WebhookRunCompleted = "run.completed"
	WebhookRunStopped   = "run.stopped"
	WebhookRunFailed    = "run.failed"
	WebhookRunCanceled  = "run.canceled"
	WebhookRunWaiting   = "run.waiting"
	WebhookPing         = "ping"
)

// WebhookEvents are the events an endpoint may subscribe to, in order.
var WebhookEvents = []string{WebhookRunCompleted, WebhookRunStopped, WebhookRunFailed, WebhookRunCanceled, WebhookRunWaiting}

// WebhookEvent returns the webhook event of a run's new status, "" for a
// status that has none.
func WebhookEvent(status string) string {
	switch status {
	case StatusCompleted:
		return WebhookRunCompleted
	case StatusStopped:
		return WebhookRunStopped
	case StatusFailed:
		return WebhookRunFailed
	case StatusCanceled:
		return WebhookRunCanceled
	case StatusWaiting:
		return WebhookRunWaiting
	}
	return ""
}

// Webhook formats: a Standard Webhooks JSON event, or a Slack incoming
// webhook message ({"text": …}).
const (
	WebhookFormatStandard = "standard"
	WebhookFormatSlack    = "slack"
)

// Webhook delivery states.
const (
	DeliveryPending   = "pending"   // to be attempted (again)
	DeliveryDelivered = "delivered" // a 2xx answered
	DeliveryFailed    = "failed"    // given up after the last attempt
)

// WebhookEndpoint is where a user's run events are delivered. Its Secret
// signs every delivery; it is shown to the user once, at creation.
type WebhookEndpoint struct {
	ID         int64
	UserID     int64
	URL        string
	Events     []string
	Format     string
	Secret     string
	CreatedAt  time.Time
	DisabledAt time.Time
}

// Subscribes reports whether the endpoint takes event (a ping always).
func (e *WebhookEndpoint) Subscribes(event string) bool {
	if event == WebhookPing {
		return true
	}
	for _, ev := range e.Events {
		if ev == event {
			return true
		}
	}
	return false
}

// WebhookDelivery is one event to deliver to one endpoint, with its
// attempts so far. WebhookID is the message id the receiver sees, the same
// on every attempt; Body is exactly what is posted. Generation counts
// redeliveries: a job of an older generation is stale.
type WebhookDelivery struct {
	ID            int64
	EndpointID    int64
	UserID        int64
	RunID         string
	Event         string
	WebhookID     string
	Body          []byte
	State         string
	Attempts      int
	Generation    int
	LastStatus    int // the last attempt's HTTP status, 0 when none answered
	LastError     string
	LastResponse  string // the last response body, truncated
	NextAttemptAt time.Time
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

// NewWebhookSecret returns a new endpoint secret: whsec_ and the base64 of
// 32 random bytes (Standard Webhooks).
func NewWebhookSecret() string {
	b := make([]byte, 32)
	rand.Read(b)
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

// NewWebhookID returns a new message id (msg_ and 26 random characters).
func NewWebhookID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return "msg_" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b))
}

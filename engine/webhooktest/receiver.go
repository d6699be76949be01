// Package webhooktest is a webhook receiver for tests: an httptest server
// that verifies every delivery's Standard Webhooks signature with its own
// implementation of the spec (not the library the server signs with), and
// fails on command.
package webhooktest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Delivery is one request the receiver got.
type Delivery struct {
	ID, Timestamp, Signature string
	Body                     []byte
	At                       time.Time
	// Verified is whether the signature verified against the secret.
	Verified bool
	// Status is what the receiver answered.
	Status int
}

// Type returns the body's type ("" for a Slack body).
func (d Delivery) Type() string {
	var v struct{ Type string }
	json.Unmarshal(d.Body, &v)
	return v.Type
}

// Receiver records deliveries and answers them.
type Receiver struct {
	*httptest.Server
	mu         sync.Mutex
	secret     string
	got        []Delivery
	failures   []int  // statuses answered before succeeding, in order
	retryAfter string // Retry-After sent with a 429 or 503
	hold       int    // requests still to hold unanswered (HoldNext)
	arrived    chan struct{}
}

// New starts a receiver that lives until t ends.
func New(t *testing.T) *Receiver {
	t.Helper()
	r := &Receiver{arrived: make(chan struct{}, 1000)}
	r.Server = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.Close)
	return r
}

// SetSecret sets the secret deliveries are verified with (whsec_…).
func (r *Receiver) SetSecret(s string) { r.mu.Lock(); r.secret = s; r.mu.Unlock() }

// FailNext answers the next requests with these statuses (then 204), with
// retryAfter as Retry-After ("" for none).
func (r *Receiver) FailNext(retryAfter string, statuses ...int) {
	r.mu.Lock()
	r.failures, r.retryAfter = append(r.failures, statuses...), retryAfter
	r.mu.Unlock()
}

// HoldNext holds the next request unanswered until its client goes away
// (it is recorded with status 0): a delivery in flight when its server
// dies.
func (r *Receiver) HoldNext() { r.mu.Lock(); r.hold++; r.mu.Unlock() }

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	held := r.hold > 0
	if held {
		r.hold--
		r.got = append(r.got, Delivery{ID: req.Header.Get("webhook-id"), Body: body, At: time.Now()})
	}
	r.mu.Unlock()
	if held {
		r.arrived <- struct{}{}
		<-req.Context().Done()
		return
	}
	d := Delivery{ID: req.Header.Get("webhook-id"), Timestamp: req.Header.Get("webhook-timestamp"),
		Signature: req.Header.Get("webhook-signature"), Body: body, At: time.Now(), Status: http.StatusNoContent}
	r.mu.Lock()
	d.Verified = req.Method == http.MethodPost && req.Header.Get("Content-Type") == "application/json" &&
		Verify(r.secret, d.ID, d.Timestamp, d.Signature, body) == nil
	if len(r.failures) > 0 {
		d.Status, r.failures = r.failures[0], r.failures[1:]
		if r.retryAfter != "" && (d.Status == 429 || d.Status == 503) {
			w.Header().Set("Retry-After", r.retryAfter)
		}
	}
	r.got = append(r.got, d)
	r.mu.Unlock()
	w.WriteHeader(d.Status)
	if d.Status >= 300 {
		fmt.Fprint(w, "receiver failing on command")
	}
	r.arrived <- struct{}{}
}

// Deliveries returns what the receiver got so far.
func (r *Receiver) Deliveries() []Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Delivery(nil), r.got...)
}

// WaitFor waits until cond holds for the deliveries so far, checking each
// time one arrives, and returns them.
func (r *Receiver) WaitFor(t *testing.T, what string, within time.Duration, cond func([]Delivery) bool) []Delivery {
	t.Helper()
	deadline := time.After(within)
	for {
		if got := r.Deliveries(); cond(got) {
			return got
		}
		select {
		case <-r.arrived:
		case <-deadline:
			t.Fatalf("timed out waiting for %s; got %d deliveries", what, len(r.Deliveries()))
		}
	}
}

// Verify checks a Standard Webhooks signature header (space-separated
// "v1,<base64>" entries) over id.timestamp.body with secret (whsec_ and
// base64), written from the spec: HMAC-SHA256, compared in constant time.
func Verify(secret, id, timestamp, header string, body []byte) error {
	if id == "" {
		return fmt.Errorf("no webhook-id")
	}
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return fmt.Errorf("webhook-timestamp %q: %w", timestamp, err)
	}
	if d := time.Since(time.Unix(ts, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return fmt.Errorf("webhook-timestamp %d out of tolerance", ts)
	}
	return verifyAt(secret, id, timestamp, header, body)
}

// verifyAt is Verify without the timestamp's tolerance.
func verifyAt(secret, id, timestamp, header string, body []byte) error {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return fmt.Errorf("secret: %w", err)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + timestamp + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, sig := range strings.Fields(header) {
		v, b64, ok := strings.Cut(sig, ",")
		if !ok || v != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return fmt.Errorf("no matching v1 signature in %q", header)
}

package storetest

import (
	"slices"
	"testing"
	"time"

	"homework/engine/spec"
)

func (s laterSuite) webhooks(t *testing.T) {
	f, ls := s.fixture(t)
	u, other := f.user("hooks@example.com"), f.user("other-hooks@example.com")
	all := &spec.WebhookEndpoint{UserID: u.ID, URL: "https://example.com/all", Events: spec.WebhookEvents,
		Format: spec.WebhookFormatStandard, Secret: spec.NewWebhookSecret()}
	done := &spec.WebhookEndpoint{UserID: u.ID, URL: "https://example.com/done", Events: []string{spec.WebhookRunCompleted},
		Format: spec.WebhookFormatSlack, Secret: spec.NewWebhookSecret()}
	theirs := &spec.WebhookEndpoint{UserID: other.ID, URL: "https://example.com/theirs", Events: spec.WebhookEvents,
		Format: spec.WebhookFormatStandard, Secret: spec.NewWebhookSecret()}
	for _, e := range []*spec.WebhookEndpoint{all, done, theirs} {
		if err := ls.CreateWebhook(f.ctx, e); err != nil {
			t.Fatal(err)
		}
		if e.ID == 0 || e.CreatedAt.IsZero() {
			t.Fatalf("created endpoint %+v has no id or time", e)
		}
	}
	list, err := ls.ListWebhooks(f.ctx, u.ID)
	if err != nil || len(list) != 2 || list[0].ID != done.ID || list[1].ID != all.ID {
		t.Fatalf("list: %v %+v", err, list)
	}
	if got := list[1]; got.URL != all.URL || got.Secret != all.Secret || got.Format != all.Format || !slices.Equal(got.Events, all.Events) {
		t.Fatalf("endpoint round-trip: got %+v want %+v", got, all)
	}
	if _, err := ls.FindWebhook(f.ctx, u.ID, theirs.ID); spec.ErrorCode(err) != spec.ENOTFOUND {
		t.Fatalf("another user's endpoint: %v", err)
	}

	// A delivery per subscribed endpoint, found and updated in a transaction.
	var waiting, completed []*spec.WebhookEndpoint
	var d *spec.WebhookDelivery
	f.tx(func(tx spec.Tx) error {
		var err error
		if waiting, err = tx.WebhooksFor(f.ctx, u.ID, spec.WebhookRunWaiting); err != nil {
			return err
		}
		if completed, err = tx.WebhooksFor(f.ctx, u.ID, spec.WebhookRunCompleted); err != nil {
			return err
		}
		d = &spec.WebhookDelivery{EndpointID: all.ID, UserID: u.ID, RunID: "r1", Event: spec.WebhookRunWaiting,
			WebhookID: spec.NewWebhookID(), Body: []byte(`{"type":"run.waiting"}`), NextAttemptAt: tx.Now()}
		return tx.InsertWebhookDelivery(f.ctx, d)
	})
	if len(waiting) != 1 || waiting[0].ID != all.ID || len(completed) != 2 || completed[0].ID != all.ID {
		t.Fatalf("subscribed endpoints: waiting %v completed %v", waiting, completed)
	}
	if d.ID == 0 || d.State != spec.DeliveryPending || d.Generation != 1 {
		t.Fatalf("inserted delivery %+v", d)
	}
	f.tx(func(tx spec.Tx) error {
		got, err := tx.FindUserWebhookDelivery(f.ctx, u.ID, all.ID, d.ID)
		if err != nil {
			return err
		}
		if _, err := tx.FindUserWebhookDelivery(f.ctx, other.ID, all.ID, d.ID); spec.ErrorCode(err) != spec.ENOTFOUND {
			t.Errorf("another user's delivery: %v", err)
		}
		got.Attempts, got.LastStatus, got.LastError, got.LastResponse = 1, 500, "HTTP 500", "oops"
		got.NextAttemptAt = tx.Now().Add(5 * time.Second)
		return tx.UpdateWebhookDelivery(f.ctx, got)
	})
	got, ep, err := ls.FindWebhookDelivery(f.ctx, d.ID)
	if err != nil || ep.ID != all.ID || got.WebhookID != d.WebhookID || string(got.Body) != `{"type":"run.waiting"}` ||
		got.Attempts != 1 || got.LastStatus != 500 || got.LastResponse != "oops" || got.RunID != "r1" || got.NextAttemptAt.IsZero() {
		t.Fatalf("delivery round-trip: %v %+v %+v", err, got, ep)
	}
	ds, err := ls.ListWebhookDeliveries(f.ctx, u.ID, all.ID, 10)
	if err != nil || len(ds) != 1 || ds[0].ID != d.ID {
		t.Fatalf("deliveries: %v %+v", err, ds)
	}
	if _, err := ls.ListWebhookDeliveries(f.ctx, other.ID, all.ID, 10); spec.ErrorCode(err) != spec.ENOTFOUND {
		t.Fatalf("another user's deliveries: %v", err)
	}
	var snap []*spec.WebhookEndpoint
	if err := ls.ReadTx(f.ctx, func(r spec.ReadStore) error {
		var err error
		snap, err = r.ListWebhooks(f.ctx, other.ID)
		return err
	}); err != nil || len(snap) != 1 || snap[0].ID != theirs.ID {
		t.Fatalf("read tx list: %v %v", err, snap)
	}

	// An endpoint fails since its oldest failure after its last success,
	// and is disabled for good.
	f.tx(func(tx spec.Tx) error {
		if since, err := tx.WebhookFailingSince(f.ctx, all.ID); err != nil || !since.IsZero() {
			t.Errorf("no failure yet: %v %v", since, err)
		}
		mk := func(state string) *spec.WebhookDelivery {
			d := &spec.WebhookDelivery{EndpointID: all.ID, UserID: u.ID, Event: spec.WebhookPing, WebhookID: spec.NewWebhookID(),
				Body: []byte(`{}`), State: state}
			if err := tx.InsertWebhookDelivery(f.ctx, d); err != nil {
				t.Fatal(err)
			}
			return d
		}
		mk(spec.DeliveryFailed)
		mk(spec.DeliveryDelivered)
		first := mk(spec.DeliveryFailed)
		mk(spec.DeliveryFailed)
		if since, err := tx.WebhookFailingSince(f.ctx, all.ID); err != nil || since.UnixMilli() != first.CreatedAt.UnixMilli() {
			t.Errorf("failing since %v (%v), want %v", since, err, first.CreatedAt)
		}
		return tx.DisableWebhook(f.ctx, all.ID)
	})
	f.tx(func(tx spec.Tx) error {
		eps, err := tx.WebhooksFor(f.ctx, u.ID, spec.WebhookRunCompleted)
		if err != nil || len(eps) != 1 || eps[0].ID != done.ID {
			t.Errorf("a disabled endpoint is still subscribed: %v %v", eps, err)
		}
		return nil
	})
	if e, err := ls.FindWebhook(f.ctx, u.ID, all.ID); err != nil || e.DisabledAt.IsZero() {
		t.Fatalf("disabled endpoint %+v %v", e, err)
	}

	if err := ls.DeleteWebhook(f.ctx, other.ID, all.ID); spec.ErrorCode(err) != spec.ENOTFOUND {
		t.Fatalf("deleting another user's endpoint: %v", err)
	}
	if err := ls.DeleteWebhook(f.ctx, u.ID, all.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ls.FindWebhookDelivery(f.ctx, d.ID); spec.ErrorCode(err) != spec.ENOTFOUND {
		t.Fatalf("a deleted endpoint's delivery: %v", err)
	}
}

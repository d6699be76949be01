package storetest

import (
	"slices"
	"testing"

	"homework/engine/spec"
)

// eventHistory: the run page's event history lists a run's events newest
// first, pages back by seq, filters by type and names the types present;
// another user's run is not found.
func (s laterSuite) eventHistory(t *testing.T) {
	f, _ := s.fixture(t)
	u, eve := f.user("a@example.com"), f.user("eve@example.com")
	f.run(u.ID, "h")
	f.run(u.ID, "quiet")
	f.tx(func(tx spec.Tx) error {
		for i := range 7 {
			typ := spec.EventToolCall
			if i%3 == 0 {
				typ = spec.EventCheckResult
			}
			if _, err := tx.AppendEvent(f.ctx, "h", typ, map[string]int{"i": i}); err != nil {
				return err
			}
		}
		return nil
	})
	seqs := func(evs []*spec.Event) []int64 {
		var out []int64
		for _, e := range evs {
			out = append(out, e.Seq)
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		typ    string
		before int64
		limit  int
		want   []int64
	}{
		{"the newest first", "", 0, 3, []int64{7, 6, 5}},
		{"the page before a seq", "", 5, 3, []int64{4, 3, 2}},
		{"the last page, short", "", 3, 3, []int64{2, 1}},
		{"only a type", string(spec.EventCheckResult), 0, 10, []int64{7, 4, 1}},
		{"a type before a seq", string(spec.EventCheckResult), 7, 1, []int64{4}},
		{"a type the run has none of", string(spec.EventRunFailed), 0, 10, nil},
	} {
		evs, err := f.s.ListRunEventsBefore(f.ctx, u.ID, "h", tc.typ, tc.before, tc.limit)
		if err != nil || !slices.Equal(seqs(evs), tc.want) {
			t.Errorf("%s: seqs %v (%v), want %v", tc.name, seqs(evs), err, tc.want)
		}
		for _, e := range evs {
			if tc.typ != "" && string(e.Type) != tc.typ || e.RunID != "h" || len(e.Data) == 0 {
				t.Errorf("%s: event %+v", tc.name, e)
			}
		}
	}
	types, err := f.s.ListRunEventTypes(f.ctx, u.ID, "h")
	if err != nil || !slices.Equal(types, []string{string(spec.EventCheckResult), string(spec.EventToolCall)}) {
		t.Errorf("types %v (%v)", types, err)
	}
	if types, err := f.s.ListRunEventTypes(f.ctx, u.ID, "quiet"); err != nil || len(types) != 0 {
		t.Errorf("a run without events has types %v (%v)", types, err)
	}
	_, err = f.s.ListRunEventsBefore(f.ctx, eve.ID, "h", "", 0, 10)
	wantCode(t, "another user's event history", err, spec.ENOTFOUND)
	_, err = f.s.ListRunEventTypes(f.ctx, eve.ID, "h")
	wantCode(t, "another user's event types", err, spec.ENOTFOUND)
}

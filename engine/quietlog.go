package engine

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// QuietRepeats wraps a log handler so that an outage is said once, with a
// count, instead of as a flood: a warning or error whose component (the
// "component" attribute given to the logger) and message were already
// logged in the last interval is held back and counted, and when the
// interval ends the last one held back is logged with "(… N more in the
// last 10s)" and a "repeated" attribute. What is below Warn passes as it
// is, and so does the first of each kind in every interval.
//
// Libraries that sample logs (slog-sampling and the like) drop repeats
// without saying how many; an operator reading an outage wants the count.
func QuietRepeats(h slog.Handler, every time.Duration) slog.Handler {
	if every <= 0 {
		return h
	}
	return &quietRepeats{h: h, g: &repeatGate{every: every, held: map[string]*held{}}}
}

type quietRepeats struct {
	h         slog.Handler
	g         *repeatGate
	component string // the logger's component attribute, part of the key
}

// repeatGate is shared by a handler and every handler derived from it.
type repeatGate struct {
	every time.Duration
	mu    sync.Mutex
	held  map[string]*held // by component and message, while its interval lasts
}

// held counts the records of one kind held back in an interval.
type held struct {
	n    int
	last slog.Record  // the newest held back
	h    slog.Handler // the handler it came to, with its attributes
}

func (q *quietRepeats) Enabled(ctx context.Context, l slog.Level) bool { return q.h.Enabled(ctx, l) }

func (q *quietRepeats) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return q.h.Handle(ctx, r)
	}
	component := q.component
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "component" {
			component = a.Value.String()
			return false
		}
		return true
	})
	key := component + "\x00" + r.Level.String() + "\x00" + r.Message
	g := q.g
	g.mu.Lock()
	if st, ok := g.held[key]; ok {
		st.n++
		st.last, st.h = r.Clone(), q.h
		g.mu.Unlock()
		return nil
	}
	g.held[key] = &held{}
	g.mu.Unlock()
	time.AfterFunc(g.every, func() { g.release(key) })
	return q.h.Handle(ctx, r)
}

// release ends key's interval: the records held back in it are said as one,
// with their count.
func (g *repeatGate) release(key string) {
	g.mu.Lock()
	st := g.held[key]
	delete(g.held, key)
	g.mu.Unlock()
	if st == nil || st.n == 0 {
		return
	}
	last := st.last
	r := slog.NewRecord(last.Time, last.Level, fmt.Sprintf("%s (… %d more in the last %s)", last.Message, st.n, g.every), last.PC)
	last.Attrs(func(a slog.Attr) bool {
		r.AddAttrs(a)
		return true
	})
	r.AddAttrs(slog.Int("repeated", st.n))
	st.h.Handle(context.Background(), r)
}

func (q *quietRepeats) WithAttrs(as []slog.Attr) slog.Handler {
	c := *q
	for _, a := range as {
		if a.Key == "component" {
			c.component = a.Value.String()
		}
	}
	c.h = q.h.WithAttrs(as)
	return &c
}

func (q *quietRepeats) WithGroup(name string) slog.Handler {
	c := *q
	c.h = q.h.WithGroup(name)
	return &c
}

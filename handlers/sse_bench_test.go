package handlers

// SSE benchmarks: each measures our stream and, in the same run and with the
// same client harness, the raw limit (a minimal net/http SSE writer fed from
// channels, or a plain ordered scan of the events table). They are
// measurements, not timed tests: run them with
//
//	go test ./handlers -run '^$' -bench BenchmarkSSE -benchtime 1x
//
// HOMEWORK_BENCH_SCALE (default 1) scales every size: 1,000 subscribers at
// 100 events/s for 3 s, a 100,000-event replay, 5,000 idle subscribers.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"homework/engine/spec"
)

func benchScale(n int) int {
	f, err := strconv.ParseFloat(os.Getenv("HOMEWORK_BENCH_SCALE"), 64)
	if err != nil || f <= 0 {
		f = 1
	}
	return max(1, int(float64(n)*f))
}

// minimalSSE is the raw limit: a plain net/http handler that writes the bytes
// it is sent on a channel and flushes.
type minimalSSE struct {
	mu   sync.Mutex
	subs map[chan []byte]struct{}
	n    atomic.Int64
	srv  *http.Server
	addr string
	wg   sync.WaitGroup
}

func newMinimalSSE(tb testing.TB) *minimalSSE {
	tb.Helper()
	m := &minimalSSE{subs: map[chan []byte]struct{}{}}
	m.srv = &http.Server{Handler: http.HandlerFunc(m.serveHTTP)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	m.addr = ln.Addr().String()
	m.wg.Add(1)
	go func() { defer m.wg.Done(); m.srv.Serve(ln) }()
	tb.Cleanup(func() {
		m.mu.Lock()
		for ch := range m.subs {
			close(ch)
			delete(m.subs, ch)
		}
		m.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m.srv.Shutdown(ctx)
		m.wg.Wait()
	})
	return m
}

func (m *minimalSSE) serveHTTP(w http.ResponseWriter, r *http.Request) {
	ch := make(chan []byte, sseBuffer)
	m.mu.Lock()
	m.subs[ch] = struct{}{}
	m.mu.Unlock()
	m.n.Add(1)
	defer m.n.Add(-1)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Write([]byte("retry: 3000\n\n"))
	f := w.(http.Flusher)
	f.Flush()
	for {
		select {
		case <-r.Context().Done():
			m.mu.Lock()
			delete(m.subs, ch)
			m.mu.Unlock()
			return
		case b, ok := <-ch:
			if !ok {
				return
			}
			w.Write(b)
			f.Flush()
		}
	}
}

// publish sends b to every subscriber without blocking.
func (m *minimalSSE) publish(b []byte) {
	m.mu.Lock()
	for ch := range m.subs {
		select {
		case ch <- b:
		default:
		}
	}
	m.mu.Unlock()
}

// benchConn is the one client harness: a raw HTTP/1.1 connection reading a
// chunked SSE body line by line.
type benchConn struct {
	conn net.Conn
	r    *bufio.Reader
}

func dialBench(addr, path, token string, bufSize int) (*benchConn, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\nAuthorization: Bearer %s\r\n\r\n", path, addr, token)
	br := bufio.NewReaderSize(conn, bufSize)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			conn.Close()
			return nil, err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			break
		}
	}
	return &benchConn{conn: conn, r: bufio.NewReaderSize(httputil.NewChunkedReader(br), bufSize)}, nil
}

// readUntil reads lines, calling fn for each "data:" line, until fn
// returns false or the stream ends.
func (c *benchConn) readUntil(fn func(data []byte) bool) error {
	for {
		line, err := c.r.ReadSlice('\n')
		if err != nil {
			return err
		}
		if d, ok := bytes.CutPrefix(line, []byte("data: ")); ok && !fn(d) {
			return nil
		}
	}
}

// sentAt extracts the publish time stamp "t" from an event's data.
func sentAt(data []byte) (int64, bool) {
	i := bytes.Index(data, []byte(`"t":`))
	if i < 0 {
		return 0, false
	}
	rest := data[i+4:]
	j := 0
	for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	n, err := strconv.ParseInt(string(rest[:j]), 10, 64)
	return n, err == nil
}

// measureLatency opens subs connections with dial, publishes events at
// rate per second with publish(t) and returns the p50 and p99
// publish-to-receive latencies over all deliveries.
func measureLatency(b *testing.B, subs, events int, rate time.Duration, dial func() (*benchConn, error), ready func() bool, publish func(t int64)) (p50, p99 time.Duration, delivered int) {
	b.Helper()
	conns := make([]*benchConn, subs)
	for i := range conns {
		c, err := dial()
		if err != nil {
			b.Fatalf("dial %d: %v", i, err)
		}
		conns[i] = c
	}
	for !ready() {
		runtime.Gosched()
	}
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := 0
			mine := make([]time.Duration, 0, events)
			c.readUntil(func(d []byte) bool {
				if t, ok := sentAt(d); ok {
					mine = append(mine, time.Duration(time.Now().UnixNano()-t))
					got++
				}
				return got < events
			})
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	tick := time.NewTicker(rate)
	for range events {
		<-tick.C
		publish(time.Now().UnixNano())
	}
	tick.Stop()
	// Give stragglers until a deadline, then close what is left.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
	}
	for _, c := range conns {
		c.conn.Close()
	}
	<-done
	slices.Sort(lat)
	if len(lat) == 0 {
		b.Fatal("no deliveries")
	}
	return lat[len(lat)/2], lat[len(lat)*99/100], len(lat)
}

func BenchmarkSSEPublishLatency(b *testing.B) {
	subs, events := benchScale(1000), benchScale(300)
	const rate = 10 * time.Millisecond // 100 events/s
	for b.Loop() {
		// The server's own heartbeat (15 s), not the tests' 50 ms: twenty
		// pings and credential checks a second on every stream are not
		// what a publish costs (the minimal writer has no heartbeat).
		ts := newTestServer(b, func(o *Options) { o.Heartbeat = 15 * time.Second })
		u := ts.user(b, "bench@example.com")
		id := ts.createRun(b, u, askStep("q"))
		ts.waitStatus(b, u, id, spec.StatusWaiting)
		last := lastSeqTB(b, ts, id)
		addr := ts.URL[len("http://"):]
		path := fmt.Sprintf("/api/runs/%s/events?since_seq=%d", id, last)
		base := ts.Bus.Subscribers()
		ours50, ours99, n1 := measureLatency(b, subs, events, rate,
			func() (*benchConn, error) { return dialBench(addr, path, u.Token, 4096) },
			func() bool { return ts.Bus.Subscribers() >= base+subs },
			func(t int64) {
				if _, err := ts.DB.AppendEvent(context.Background(), id, "bench", map[string]int64{"t": t}); err != nil {
					b.Error(err)
				}
			})

		m := newMinimalSSE(b)
		var seq atomic.Int64
		raw50, raw99, n2 := measureLatency(b, subs, events, rate,
			func() (*benchConn, error) { return dialBench(m.addr, "/", "", 4096) },
			func() bool { return m.n.Load() >= int64(subs) },
			func(t int64) {
				e := &spec.Event{ID: seq.Add(1), RunID: id, Seq: seq.Load(), Type: "bench", CreatedAt: time.Now(),
					Data: []byte(fmt.Sprintf(`{"t":%d}`, t))}
				m.publish(appendSSE(nil, e.Seq, e))
			})
		b.ReportMetric(float64(ours99.Microseconds())/1000, "p99-ms")
		b.ReportMetric(float64(raw99.Microseconds())/1000, "raw-p99-ms")
		b.ReportMetric(float64(ours99)/float64(max(raw99, 1)), "p99-ratio")
		b.Logf("publish→receive, %d subscribers at 100 events/s, %d events: ours p50 %v p99 %v (%d deliveries); minimal writer p50 %v p99 %v (%d deliveries); p99 ratio %.2f",
			subs, events, ours50, ours99, n1, raw50, raw99, n2, float64(ours99)/float64(max(raw99, 1)))
	}
}

func lastSeqTB(tb testing.TB, ts *testServer, runID string) int64 {
	tb.Helper()
	n, err := ts.DB.LastSeq(ts.ctx, runID)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

func BenchmarkSSEReplay(b *testing.B) {
	n := benchScale(100_000)
	for b.Loop() {
		ts := newTestServer(b, nil)
		u := ts.user(b, "bench@example.com")
		id := ts.createRun(b, u, askStep("q"))
		ts.waitStatus(b, u, id, spec.StatusWaiting)
		ctx := context.Background()
		for done := 0; done < n; {
			k := min(1000, n-done)
			err := ts.DB.WriteTx(ctx, func(tx spec.Tx) error {
				for i := range k {
					if _, err := tx.AppendEvent(ctx, id, "bench", map[string]int{"i": done + i}); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			done += k
		}
		if _, err := ts.Engine.Cancel(ctx, u.ID, id); err != nil {
			b.Fatal(err)
		}
		total := lastSeqTB(b, ts, id)

		// The raw ordered scan and our stream (connect, replay
		// everything, end), measured in turns, each after a collection
		// so that neither pays for the other's garbage; the ratio is the
		// median of the rounds', as one round swings by half either way
		// on a busy two-core machine.
		var all []*spec.Event
		scanOnce := func() (time.Duration, int64) {
			runtime.GC()
			start := time.Now()
			var scanned int64
			keep := all == nil
			for after := int64(0); ; {
				evs, err := ts.DB.ListRunEvents(ctx, u.ID, id, after, sseReplayPage)
				if err != nil {
					b.Fatal(err)
				}
				scanned += int64(len(evs))
				if keep {
					all = append(all, evs...)
				}
				if len(evs) < sseReplayPage {
					break
				}
				after = evs[len(evs)-1].Seq
			}
			return time.Since(start), scanned
		}
		// The same pages read replayReaders at a time, as a run stream's
		// replay reads them (readAhead): what the machine's cores can
		// read, beside what one reader can.
		scanAhead := func() time.Duration {
			runtime.GC()
			start := time.Now()
			var scanned atomic.Int64
			var wg sync.WaitGroup
			for i := range replayReaders {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for k := i; ; k += replayReaders {
						evs, err := ts.DB.ListRunEvents(ctx, u.ID, id, int64(k)*sseReplayPage, sseReplayPage)
						if err != nil {
							b.Error(err)
							return
						}
						scanned.Add(int64(len(evs)))
						if len(evs) < sseReplayPage {
							return
						}
					}
				}()
			}
			wg.Wait()
			d := time.Since(start)
			if scanned.Load() != total {
				b.Fatalf("the scan with %d readers read %d events, want %d", replayReaders, scanned.Load(), total)
			}
			return d
		}
		addr := ts.URL[len("http://"):]
		replayOnce := func() time.Duration {
			runtime.GC()
			start := time.Now()
			c, err := dialBench(addr, "/api/runs/"+id+"/events", u.Token, 64<<10)
			if err != nil {
				b.Fatal(err)
			}
			var got int64
			c.readUntil(func([]byte) bool { got++; return true })
			d := time.Since(start)
			c.conn.Close()
			if got != total {
				b.Fatalf("replayed %d events, want %d", got, total)
			}
			return d
		}
		const rounds = 5
		var scans, aheads, replays []time.Duration
		var ratios, aheadRatios []float64
		var scanned int64
		for range rounds {
			scan, n := scanOnce()
			ahead := scanAhead()
			ours := replayOnce()
			scanned = n
			scans, aheads, replays = append(scans, scan), append(aheads, ahead), append(replays, ours)
			ratios = append(ratios, scan.Seconds()/ours.Seconds())
			aheadRatios = append(aheadRatios, ahead.Seconds()/ours.Seconds())
		}
		for _, s := range [][]time.Duration{scans, aheads, replays} {
			slices.Sort(s)
		}
		slices.Sort(ratios)
		slices.Sort(aheadRatios)
		scan, ahead, ours, got := scans[rounds/2], aheads[rounds/2], replays[rounds/2], total

		// The minimal writer writing the same bytes from a channel.
		m := newMinimalSSE(b)
		c2, err := dialBench(m.addr, "/", "", 64<<10)
		if err != nil {
			b.Fatal(err)
		}
		for m.n.Load() < 1 {
			runtime.Gosched()
		}
		start := time.Now()
		go func() {
			var buf []byte
			for _, e := range all {
				buf = appendSSE(buf[:0], e.Seq, e)
				m.blockingPublish(bytes.Clone(buf))
			}
		}()
		var got2 int64
		c2.readUntil(func([]byte) bool { got2++; return got2 < scanned })
		raw := time.Since(start)
		c2.conn.Close()

		rate := func(n int64, d time.Duration) float64 { return float64(n) / d.Seconds() }
		b.ReportMetric(rate(got, ours), "events/s")
		b.ReportMetric(rate(scanned, scan), "scan-events/s")
		b.ReportMetric(rate(got2, raw), "raw-events/s")
		b.ReportMetric(ratios[rounds/2], "vs-scan")
		b.ReportMetric(aheadRatios[rounds/2], "vs-scan-ahead")
		b.ReportMetric(raw.Seconds()/ours.Seconds(), "vs-raw")
		b.Logf("replay of %d events to one client, the medians of %d rounds: ours %.0f events/s (%v); ordered scan %.0f events/s (%v); ratio %.2f (rounds %.2f); the scan reading %d pages at a time as the replay does %.0f events/s (%v), ratio %.2f (rounds %.2f); minimal writer %.0f events/s (%v, ratio %.2f)",
			got, rounds, rate(got, ours), ours, rate(scanned, scan), scan, ratios[rounds/2], ratios,
			replayReaders, rate(scanned, ahead), ahead, aheadRatios[rounds/2], aheadRatios,
			rate(got2, raw), raw, raw.Seconds()/ours.Seconds())
	}
}

// blockingPublish sends b to every subscriber, waiting for room.
func (m *minimalSSE) blockingPublish(b []byte) {
	m.mu.Lock()
	subs := make([]chan []byte, 0, len(m.subs))
	for ch := range m.subs {
		subs = append(subs, ch)
	}
	m.mu.Unlock()
	for _, ch := range subs {
		ch <- b
	}
}

func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// openIdle opens n connections with a bounded number of dials at once.
func openIdle(b *testing.B, n int, dial func() (*benchConn, error)) []*benchConn {
	b.Helper()
	conns := make([]*benchConn, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	var failed atomic.Value
	for i := range conns {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c, err := dial()
			if err != nil {
				failed.Store(err)
				return
			}
			conns[i] = c
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	return conns
}

func BenchmarkSSEIdleMemory(b *testing.B) {
	n := benchScale(5000)
	for b.Loop() {
		ts := newTestServer(b, func(o *Options) { o.Heartbeat = time.Hour })
		u := ts.user(b, "bench@example.com")
		id := ts.createRun(b, u, askStep("q"))
		ts.waitStatus(b, u, id, spec.StatusWaiting)
		last := lastSeqTB(b, ts, id)
		addr := ts.URL[len("http://"):]
		path := fmt.Sprintf("/api/runs/%s/events?since_seq=%d", id, last)
		base := ts.Bus.Subscribers()

		before := heapInUse()
		conns := openIdle(b, n, func() (*benchConn, error) { return dialBench(addr, path, u.Token, 1024) })
		for ts.Bus.Subscribers() < base+n {
			runtime.Gosched()
		}
		ours := float64(heapInUse()-before) / float64(n)
		// Closed streams notice at their next heartbeat or at shutdown;
		// the minimal writer's baseline is taken after they are closed.
		for _, c := range conns {
			c.conn.Close()
		}

		m := newMinimalSSE(b)
		before = heapInUse()
		conns = openIdle(b, n, func() (*benchConn, error) { return dialBench(m.addr, "/", "", 1024) })
		for m.n.Load() < int64(n) {
			runtime.Gosched()
		}
		raw := float64(heapInUse()-before) / float64(n)
		for _, c := range conns {
			c.conn.Close()
		}

		b.ReportMetric(ours, "B/subscriber")
		b.ReportMetric(raw, "raw-B/subscriber")
		b.ReportMetric(ours/raw, "ratio")
		b.Logf("idle subscribers (%d, heap delta per subscriber, client side included in both): ours %.0f B, minimal writer %.0f B, ratio %.2f",
			n, ours, raw, ours/raw)
	}
}

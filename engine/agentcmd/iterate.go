package agentcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"homework/engine/checks"
	"homework/engine/proc"
	"homework/engine/spec"
)

const emitTimeout = 5 * time.Second

// Iterate runs the agent once: argv in the work directory, in its own
// process group, with the prompt on stdin. Its combined output is kept up to
// the run's cap (the first quarter and the last three quarters; the bytes in
// between are counted as dropped) and streamed as EventOutput events.
//
// A non-zero exit or a timeout is not a Go error: Result.Error and
// Result.ErrorFingerprint ("timeout" for a timeout) describe it. A
// configuration that can never work (command runs disabled, a work directory
// that is gone or now resolves outside the root, an agent that cannot be
// started) sets Result.Fatal. Iterate returns a non-nil error only for an
// infrastructure failure, or when ctx is done, after killing the process
// group; the Result then holds the output so far.
func (e *Executor) Iterate(ctx context.Context, in *spec.Input) (*spec.Result, error) {
	res := &spec.Result{ToolCalls: 1}
	if !e.Enabled() {
		return fatalf(res, "Command runs are not enabled on this server (--allow-command-runs ROOT).")
	}
	if in.Config == nil || in.Config.Agent == nil || len(in.Config.Agent.Argv) == 0 || in.Config.Agent.Argv[0] == "" {
		return fatalf(res, "The run has no agent command (agent.argv).")
	}
	// Resolve again: a symlink may have been moved since the run was created.
	wd, err := e.resolveWorkdir(in.Config.Agent.Workdir)
	if err != nil {
		return fatalf(res, "The work directory cannot be used: %s", spec.ErrorMessage(err))
	}
	lock, err := e.claimWorkdir(ctx, in, wd)
	if err != nil {
		return nil, err
	}
	defer lock.unlock()
	prompt, err := buildPrompt(in.Config, e.promptData(in, wd))
	if err != nil {
		return fatalf(res, "The prompt template cannot be rendered: %v", err)
	}
	spec.Transcribe(ctx, in.Host, spec.TranscriptEntry{Kind: spec.TranscriptPrompt, Text: prompt})

	timeout, outCap := e.limits(in.Config)
	changes := e.beginChanges(ctx, wd, in.RunID)
	run, err := e.runAgent(ctx, in, wd, prompt, timeout, outCap)
	if err != nil {
		return nil, err
	}
	if run.startErr != nil {
		if errors.Is(run.startErr, exec.ErrNotFound) || errors.Is(run.startErr, fs.ErrNotExist) || errors.Is(run.startErr, fs.ErrPermission) {
			return fatalf(res, "The agent cannot be started: %v", run.startErr)
		}
		return nil, fmt.Errorf("agentcmd: start agent: %w", run.startErr)
	}

	parsed := e.recordOutput(ctx, in, res, run, prompt)
	describeOutcome(res, run, parsed, timeout)
	e.emitExit(ctx, in, run)
	if run.reason == proc.StopCanceled {
		return res, fmt.Errorf("agentcmd: iteration interrupted: %w", context.Cause(ctx))
	}
	e.recordWorkdir(ctx, in, wd, res, parsed, changes)
	return res, nil
}

// fatalf marks res as failed by a configuration that can never work.
func fatalf(res *spec.Result, format string, args ...any) (*spec.Result, error) {
	msg := fmt.Sprintf(format, args...)
	res.Fatal = &spec.Fatal{Type: "error", Detail: msg}
	res.Error = msg
	res.Summary = msg
	res.ErrorFingerprint = "fatal:" + ErrorFingerprint(0, msg)
	return res, nil
}

// claimWorkdir takes the work directory's lock, which the caller holds for
// the whole run of the agent (one agent per work directory), and first ends
// any agent an earlier attempt left behind when its server was killed.
func (e *Executor) claimWorkdir(ctx context.Context, in *spec.Input, wd string) (*workdirLock, error) {
	if err := os.MkdirAll(filepath.Join(wd, ".homework"), 0o755); err != nil {
		return nil, fmt.Errorf("agentcmd: create .homework: %w", err)
	}
	lock, err := lockWorkdir(ctx, wd)
	if err != nil {
		return nil, err
	}
	if pgid, err := reapOrphanGroup(ctx, wd); err != nil {
		lock.unlock()
		return nil, err
	} else if pgid != 0 {
		e.emit(ctx, in, spec.EventAgentOrphanKilled, spec.OrphanKilledData{Iteration: in.Iteration, PGID: pgid})
	}
	return lock, nil
}

// limits returns the agent's timeout and output cap: the agent's own, else
// the run's iteration timeout, else the server's defaults, never over the
// server's maximums.
func (e *Executor) limits(cfg *spec.Config) (timeout time.Duration, outCap int64) {
	a := cfg.Agent
	timeout = e.opts.DefaultTimeout
	if a.TimeoutMS > 0 {
		timeout = time.Duration(a.TimeoutMS) * time.Millisecond
	} else if t := cfg.Budgets.IterationTimeoutMS; t > 0 {
		timeout = time.Duration(t) * time.Millisecond
	}
	timeout = min(timeout, e.opts.MaxTimeout)
	outCap = e.opts.DefaultOutputCap
	if a.OutputCapBytes > 0 {
		outCap = min(a.OutputCapBytes, e.opts.MaxOutputCap)
	}
	return timeout, outCap
}

// recordOutput sets res.Output (the agent's final answer when its output
// format parses), the tool calls, the output hash and the promise, and
// returns the parsed output, nil when the format is plain text.
func (e *Executor) recordOutput(ctx context.Context, in *spec.Input, res *spec.Result, run *agentRun, prompt string) *ParsedOutput {
	// The output is stored and sent as text; a binary-spewing agent must not
	// make it invalid UTF-8.
	res.Output = strings.ToValidUTF8(run.output, "\uFFFD")
	parsed := e.readStructured(ctx, in, res.Output, run.duration, run.live)
	if parsed != nil {
		res.UsageUnknown, res.CostUnknown = parsed.UsageUnknown, parsed.CostUnknown
	} else {
		// Creation refuses a budget on text output, but Continue may add
		// one: the gate then asks rather than spend uncounted.
		res.UsageUnknown = fmt.Sprintf("iteration %d's output is read as text, which reports no tokens or cost", in.Iteration)
	}
	if parsed != nil && parsed.OK {
		// Promises and content checks read the agent's final answer.
		res.Output = parsed.FinalText
		res.ToolCalls += len(parsed.ToolUses)
	}
	res.OutputHash = OutputHash(res.Output)
	res.Promise = DetectPromise(res.Output, prompt, in.Config.Completion.Token)
	return parsed
}

// describeOutcome sets res.Error and res.ErrorFingerprint from how the agent
// ended, and res.Summary from its output.
func describeOutcome(res *spec.Result, run *agentRun, parsed *ParsedOutput, timeout time.Duration) {
	summary := Summarize(res.Output)
	switch {
	case run.reason == proc.StopCanceled:
		res.Error = "The iteration was interrupted and the agent's process group killed."
	case run.reason == proc.StopTimeout:
		res.Error = fmt.Sprintf("The agent timed out after %s and its process group was killed.", timeout)
		res.ErrorFingerprint = "timeout"
	case !run.state.Success():
		res.Error = fmt.Sprintf("The agent failed (%s).", checks.DescribeExit(run.state))
		if l := LastErrorLine(res.Output); l != "" {
			res.Error = fmt.Sprintf("The agent failed (%s): %s", checks.DescribeExit(run.state), l)
		}
		res.ErrorFingerprint = ErrorFingerprint(run.state.ExitCode(), res.Output)
	}
	if parsed != nil && parsed.Error != "" && run.reason == proc.StopExited {
		res.Error = "The agent reported an error: " + parsed.Error
		res.ErrorFingerprint = "agent:" + ErrorFingerprint(0, parsed.Error)
	}
	if run.dropped > 0 {
		summary = truncate(summary, summaryBytes) + fmt.Sprintf("\n(%d bytes of output over the cap were dropped)", run.dropped)
	}
	if res.Error != "" {
		summary = res.Error + "\n" + summary
	}
	res.Summary = truncate(summary, 2*summaryBytes)
}

// emitExit emits EventExit for a finished agent.
func (e *Executor) emitExit(ctx context.Context, in *spec.Input, run *agentRun) {
	e.emit(ctx, in, spec.EventAgentExit, spec.AgentExitData{
		Iteration:    in.Iteration,
		Status:       checks.DescribeExit(run.state),
		ExitCode:     run.state.ExitCode(),
		TimedOut:     run.reason == proc.StopTimeout,
		DurationMS:   run.duration.Milliseconds(),
		OutputBytes:  run.total,
		DroppedBytes: run.dropped,
	})
}

// recordWorkdir records what the agent did to the work directory: the
// changed files as artifacts, the write mode's verdict, the summary the
// next prompt shows, and the diff hash that measures progress.
func (e *Executor) recordWorkdir(ctx context.Context, in *spec.Input, wd string, res *spec.Result, parsed *ParsedOutput, changes *iterationChanges) {
	ch, known := changes.end(ctx)
	if known {
		res.Artifacts = ch.refs()
	}
	enforceWriteMode(in, wd, res, ch, known)
	last := res.Summary
	if parsed != nil && parsed.OK && strings.TrimSpace(parsed.FinalText) != "" {
		last = parsed.FinalText
	}
	e.saveLastSummary(wd, in.RunID, last)
	if h, err := e.DiffHash(ctx, wd); err == nil {
		res.DiffHash = h
	} else {
		res.DiffHash = "unavailable:" + ErrorFingerprint(0, err.Error())
	}
	res.Progress = res.DiffHash
}

// agentRun is how one agent process went.
type agentRun struct {
	state    *os.ProcessState
	reason   string // proc.StopExited, StopTimeout or StopCanceled
	output   string
	total    int64
	dropped  int64
	duration time.Duration
	startErr error
	live     *liveTools // nil unless the output format streams
}

// runAgent runs the agent process to its end. Every goroutine it starts has
// exited when it returns.
func (e *Executor) runAgent(ctx context.Context, in *spec.Input, wd, prompt string, timeout time.Duration, outCap int64) (*agentRun, error) {
	p, startErr, err := e.startAgent(ctx, in, wd)
	if err != nil {
		return nil, err
	}
	if startErr != nil {
		return &agentRun{startErr: startErr}, nil
	}
	defer forgetGroup(wd)

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		// Exits when the prompt is written, the agent closes stdin, or
		// p.stdin is closed below.
		defer wg.Done()
		p.stdin.WriteString(prompt)
		p.stdin.Close()
	}()
	out := e.newAgentOutput(in, outCap)
	streamDone := make(chan struct{})
	wg.Add(1)
	go func() {
		// Exits after the final flush, once streamDone is closed.
		defer wg.Done()
		out.stream.run(ctx, e.opts.FlushInterval, streamDone)
	}()
	if out.live != nil {
		wg.Add(1)
		go func() {
			// Exits when live.lines is closed, after the reader's end.
			defer wg.Done()
			out.live.run(ctx, in.Host, in.Iteration)
		}()
	}
	readDone := make(chan struct{})
	go func() {
		// Exits at EOF (every holder of the pipe gone) or when p.out is
		// closed below.
		defer close(readDone)
		out.readFrom(p.out)
	}()

	state, reason := p.proc.Wait(ctx, timeout, e.opts.KillGrace)
	duration := time.Since(p.start)
	e.stopReading(p.out, readDone)
	if out.live != nil {
		out.live.write([]byte("\n")) // a last line without its newline
		close(out.live.lines)
	}
	p.stdin.Close()
	close(streamDone)
	wg.Wait()

	output, dropped := out.capt.result()
	return &agentRun{state: state, reason: reason, output: output, total: out.capt.total, dropped: dropped, duration: duration, live: out.live}, nil
}

// agentProcess is a started agent and our ends of its pipes.
type agentProcess struct {
	proc  *proc.Process
	stdin *os.File // the write end of its stdin
	out   *os.File // the read end of its combined stdout and stderr
	start time.Time
}

// startAgent starts the agent in wd in its own process group and records
// the group, so that a crash cannot leave it running unseen. startErr is
// why the agent could not be started; err is an infrastructure failure.
func (e *Executor) startAgent(ctx context.Context, in *spec.Input, wd string) (p *agentProcess, startErr, err error) {
	argv := agentArgv(in.Config.Agent, wd, in.RunID)
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("agentcmd: stdin pipe: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		stdinW.Close()
		return nil, nil, fmt.Errorf("agentcmd: output pipe: %w", err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = wd
	cmd.Env = e.Environ(in)
	cmd.Stdin = stdinR
	cmd.Stdout, cmd.Stderr = outW, outW
	start := time.Now()
	// Under the attempt's leash (ctx): the agent ends with the server and
	// with the attempt's hold on the run.
	pr, err := proc.Start(ctx, cmd)
	// The child has its own copies (or never started).
	stdinR.Close()
	outW.Close()
	if errors.Is(err, proc.ErrLeashClosed) {
		stdinW.Close()
		outR.Close()
		return nil, nil, fmt.Errorf("agentcmd: %w", err)
	} else if err != nil {
		stdinW.Close()
		outR.Close()
		return nil, err, nil
	}
	if err := recordGroup(wd, pr.Pgid); err != nil {
		// Unrecorded, a crash could leave it running unseen: do not run it.
		pr.Kill()
		pr.Wait(context.Background(), 0, 0)
		stdinW.Close()
		outR.Close()
		return nil, nil, fmt.Errorf("agentcmd: record the agent's process group: %w", err)
	}
	return &agentProcess{proc: pr, stdin: stdinW, out: outR, start: start}, nil, nil
}

// stopReading waits up to the kill grace for the reader of out to reach
// EOF, then closes out and waits for the reader to end.
func (e *Executor) stopReading(out *os.File, readDone <-chan struct{}) {
	g := time.NewTimer(e.opts.KillGrace)
	select {
	case <-readDone:
	case <-g.C:
		// A process that left the group still holds the pipe; stop reading.
	}
	g.Stop()
	out.Close()
	<-readDone
}

// agentOutput is where the agent's output goes as it is read: the capped
// capture, the live stream, the live tool parser (nil unless the output
// format streams) and the transcript.
type agentOutput struct {
	capt       *capture
	stream     *streamer
	live       *liveTools
	transcript io.Writer
}

func (e *Executor) newAgentOutput(in *spec.Input, outCap int64) *agentOutput {
	return &agentOutput{
		capt:       newCapture(outCap),
		stream:     &streamer{host: in.Host, iteration: in.Iteration, limit: outCap, flushBytes: e.opts.FlushBytes, kick: make(chan struct{}, 1)},
		live:       newLiveTools(in.Config.Agent.OutputFormat),
		transcript: spec.TranscriptWriter(in.Host, "output"),
	}
}

// readFrom passes everything read from r on until r's EOF or error.
func (o *agentOutput) readFrom(r io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			o.capt.Write(buf[:n])
			o.stream.add(buf[:n])
			if o.live != nil {
				o.live.write(buf[:n])
			}
			o.transcript.Write(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// capture keeps the first quarter and the last three quarters of a capped
// output and counts what falls between.
type capture struct {
	headCap int
	head    []byte
	tail    *checks.Tail
	total   int64
}

func newCapture(limit int64) *capture {
	h := int(limit / 4)
	return &capture{headCap: h, tail: checks.NewTail(int(limit) - h)}
}

func (c *capture) Write(p []byte) {
	c.total += int64(len(p))
	if room := c.headCap - len(c.head); room > 0 {
		n := min(room, len(p))
		c.head = append(c.head, p[:n]...)
		p = p[n:]
	}
	if len(p) > 0 {
		c.tail.Write(p)
	}
}

// result returns the kept output, with a marker where bytes were dropped,
// and how many were.
func (c *capture) result() (string, int64) {
	tb := c.tail.Bytes()
	dropped := c.total - int64(len(c.head)) - int64(len(tb))
	if dropped <= 0 {
		return string(c.head) + string(tb), 0
	}
	i := 0
	for i < len(tb) && i < utf8.UTFMax && !utf8.RuneStart(tb[i]) {
		i++
	}
	return fmt.Sprintf("%s\n[… %d bytes of output dropped …]\n%s", c.head, dropped, tb[i:]), dropped
}

// streamer batches live output into EventOutput events: a batch goes out
// every flush interval or when flushBytes are pending. It streams at most
// limit bytes in all; the agent is never slowed down by a slow Emit.
type streamer struct {
	host       spec.Host
	iteration  int
	limit      int64
	flushBytes int
	kick       chan struct{}

	mu        sync.Mutex
	pending   []byte
	accepted  int64
	truncated bool
	seq       int
}

func (s *streamer) add(p []byte) {
	s.mu.Lock()
	if room := s.limit - s.accepted; room < int64(len(p)) {
		s.truncated = true
		p = p[:max(room, 0)]
	}
	s.pending = append(s.pending, p...)
	s.accepted += int64(len(p))
	full := len(s.pending) >= s.flushBytes
	s.mu.Unlock()
	if full {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

func (s *streamer) run(ctx context.Context, interval time.Duration, done <-chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.kick:
			s.flush(ctx, false)
		case <-t.C:
			s.flush(ctx, false)
		case <-done:
			s.flush(ctx, true)
			return
		}
	}
}

func (s *streamer) flush(ctx context.Context, final bool) {
	s.mu.Lock()
	b := s.pending
	if !final {
		// Keep an incomplete trailing rune for the next batch.
		for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
			if utf8.RuneStart(b[i]) {
				if !utf8.FullRune(b[i:]) {
					b = b[:i]
				}
				break
			}
		}
	}
	s.pending = append([]byte(nil), s.pending[len(b):]...)
	truncated := final && s.truncated
	s.mu.Unlock()
	if len(b) == 0 && !truncated {
		return
	}
	s.seq++
	emitWith(ctx, s.host, spec.EventAgentOutput, spec.AgentOutputData{Iteration: s.iteration, Seq: s.seq, Text: string(b), Truncated: truncated})
}

func (e *Executor) emit(ctx context.Context, in *spec.Input, typ spec.EventType, data any) {
	emitWith(ctx, in.Host, typ, data)
}

// emitWith emits an event even when ctx is done (the output of an
// interrupted iteration is worth keeping), bounded in time. Emit errors are
// ignored: live output is best effort.
func emitWith(ctx context.Context, h spec.Host, typ spec.EventType, data any) {
	if h == nil {
		return
	}
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), emitTimeout)
	defer cancel()
	h.Emit(ectx, typ, data)
}

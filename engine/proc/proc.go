// Package proc starts the processes an iteration runs (command agents,
// command checks, MCP servers) so that they live exactly as long as the
// attempt that owns them, and never longer than the server process.
//
// Every process is started through a small supervisor: this same binary,
// re-executed in a mode its package init recognises (see supervisor.go).
// The supervisor starts the real command in a process group of its own and
// then watches a lifeline, a pipe whose write end only the server holds:
//
//   - When the server process dies, however it dies (SIGKILL included), the
//     kernel closes the write end, the supervisor reads EOF and kills the
//     whole group at once. The command itself also gets a parent-death
//     signal from the supervisor's main thread, should the supervisor die.
//   - When the attempt that owns the process loses its lease, it closes the
//     lifeline (Leash.Close), with the same effect.
//   - While the attempt holds its lease it tells the supervisor how long the
//     lease is good for (Leash.Extend). A supervisor that hears nothing
//     before that time runs out stops the group (SIGSTOP): a server paused
//     past its lease (SIGSTOP, a VM freeze) can no longer renew it, so its
//     processes must do nothing while another process may take the run over.
//     When the attempt renews again the group continues (SIGCONT); when it
//     learns that the run was taken, it closes the lifeline and the group is
//     killed without ever having run beside the new attempt. An owner that
//     learns it may be taken for dead stops the group at once (Freeze).
//
// The caller keeps an ordinary *exec.Cmd: Start rewrites it to run the
// supervisor, whose exit status mirrors the command's (its exit code, or the
// signal that killed it).
package proc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// supervisorArg0 is the argv[0] that makes this binary a supervisor.
const supervisorArg0 = "homework-proc-supervisor"

// raceExitEnv keeps a race-detector supervisor from sleeping at exit.
const raceExitEnv = "GORACE=atexit_sleep_ms=0"

// noDeadline is the remaining time that means "no deadline".
const noDeadline = -1

// ErrLeashClosed is returned by Start when the attempt whose leash is in the
// context no longer holds its run: nothing may start on its behalf.
var ErrLeashClosed = errors.New("proc: the attempt no longer holds its run")

// A Leash ties the processes started under it to an attempt's lease: Extend
// after every renewal, Close when the attempt ends or loses the lease.
// A Leash is safe for concurrent use.
type Leash struct {
	mu       sync.Mutex
	closed   bool
	deadline time.Time           // monotonic; zero means none
	lines    map[*os.File]string // lifelines' write ends, by the group they guard
}

// NewLeash returns a leash whose processes may run for d from now.
func NewLeash(d time.Duration) *Leash {
	return &Leash{deadline: time.Now().Add(d), lines: map[*os.File]string{}}
}

// Extend tells every process under the leash that it may run for d more
// from now, and resumes those a lapsed deadline had stopped.
func (l *Leash) Extend(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.deadline = time.Now().Add(d)
	for f := range l.lines {
		sendRemaining(f, d)
	}
}

// Freeze stops every process under the leash at once (SIGSTOP), as a
// lapsed deadline would: the owner can no longer tell whether it holds its
// run. Extend continues them; Close kills them.
func (l *Leash) Freeze() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.deadline = time.Now()
	for f := range l.lines {
		sendRemaining(f, 0)
	}
}

// Close kills every process under the leash (their supervisors read EOF)
// and makes later Starts under it fail with ErrLeashClosed.
func (l *Leash) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	for f := range l.lines {
		f.Close()
	}
	clear(l.lines)
}

// Closed reports whether Close was called.
func (l *Leash) Closed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// attach registers a lifeline and returns the time left, or ErrLeashClosed.
func (l *Leash) attach(f *os.File) (time.Duration, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, ErrLeashClosed
	}
	l.lines[f] = ""
	return max(time.Until(l.deadline), 0), nil
}

// detach forgets a lifeline and reports whether it was still attached (so
// that the caller closes it, not Close).
func (l *Leash) detach(f *os.File) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.lines[f]
	delete(l.lines, f)
	return ok
}

type leashKey struct{}

// WithLeash returns a context whose Starts put their processes under l.
func WithLeash(ctx context.Context, l *Leash) context.Context {
	return context.WithValue(ctx, leashKey{}, l)
}

// LeashFrom returns the context's leash, or nil.
func LeashFrom(ctx context.Context) *Leash {
	l, _ := ctx.Value(leashKey{}).(*Leash)
	return l
}

// sendRemaining writes d (in milliseconds) to a lifeline without blocking
// the caller for long: a supervisor reads its lifeline all the time.
func sendRemaining(f *os.File, d time.Duration) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(max(d.Milliseconds(), 0)))
	f.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	f.Write(b[:])
}

// Process is a command started by Start: the supervisor is Cmd.Process,
// the command is the leader of process group Pgid.
type Process struct {
	Cmd   *exec.Cmd
	Pgid  int
	line  *os.File // our end of the lifeline
	leash *Leash
	once  sync.Once
}

// Start starts cmd under a supervisor, in a process group of its own, so
// that it and everything it starts end with the server process and with the
// attempt whose leash ctx carries (WithLeash). cmd must be unstarted, with
// Path, Args, Dir, Env and its standard files set as for cmd.Start; it may
// not use ExtraFiles or SysProcAttr. Errors starting the command itself
// (not found, not executable) are returned as cmd.Start would return them.
// The caller waits with Wait, which also ends the supervision.
func Start(ctx context.Context, cmd *exec.Cmd) (*Process, error) {
	if cmd.Err != nil {
		return nil, cmd.Err
	}
	if cmd.Process != nil {
		return nil, errors.New("proc: command already started")
	}
	if len(cmd.ExtraFiles) > 0 || cmd.SysProcAttr != nil {
		return nil, errors.New("proc: ExtraFiles and SysProcAttr are the supervisor's")
	}
	if !supervised {
		return startUnsupervised(ctx, cmd)
	}
	lineR, lineW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("proc: lifeline: %w", err)
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		lineR.Close()
		lineW.Close()
		return nil, fmt.Errorf("proc: status pipe: %w", err)
	}
	remaining := time.Duration(noDeadline)
	leash := LeashFrom(ctx)
	if leash != nil {
		if remaining, err = leash.attach(lineW); err != nil {
			lineR.Close()
			lineW.Close()
			statusR.Close()
			statusW.Close()
			return nil, err
		}
	}
	p := &Process{Cmd: cmd, line: lineW, leash: leash}
	path, args := cmd.Path, cmd.Args
	if len(args) == 0 {
		args = []string{path}
	}
	ms := int64(noDeadline)
	if remaining != noDeadline {
		ms = remaining.Milliseconds()
	}
	cmd.Path = selfExe()
	cmd.Args = append([]string{supervisorArg0, strconv.FormatInt(ms, 10), path}, args...)
	if raceEnabled {
		// The supervisor drops it again before starting the command.
		env := cmd.Env
		if env == nil {
			env = os.Environ()
		}
		cmd.Env = append(env[:len(env):len(env)], raceExitEnv)
	}
	cmd.ExtraFiles = []*os.File{lineR, statusW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	// The supervisor holds its own copies (or never started).
	lineR.Close()
	statusW.Close()
	if err != nil {
		statusR.Close()
		p.endLine()
		return nil, fmt.Errorf("proc: start supervisor: %w", err)
	}
	status, _ := readAll(statusR)
	statusR.Close()
	msg := strings.TrimSpace(string(status))
	if pid, ok := strings.CutPrefix(msg, "ok "); ok {
		if p.Pgid, err = strconv.Atoi(pid); err == nil && p.Pgid > 1 {
			return p, nil
		}
	}
	// The command did not start: the supervisor exits at once.
	cmd.Wait()
	p.endLine()
	if m, ok := strings.CutPrefix(msg, "err "); ok {
		return nil, startError(m)
	}
	return nil, fmt.Errorf("proc: the supervisor did not start the command (%q, %s)", msg, cmd.ProcessState)
}

// startError rebuilds the error cmd.Start would have returned from its
// text, keeping the errors callers tell apart (not found, permission).
func startError(msg string) error {
	switch {
	case strings.HasSuffix(msg, syscall.ENOENT.Error()):
		return &os.PathError{Op: "fork/exec", Path: strings.TrimSuffix(strings.TrimPrefix(msg, "fork/exec "), ": "+syscall.ENOENT.Error()), Err: syscall.ENOENT}
	case strings.HasSuffix(msg, syscall.EACCES.Error()):
		return &os.PathError{Op: "fork/exec", Path: strings.TrimSuffix(strings.TrimPrefix(msg, "fork/exec "), ": "+syscall.EACCES.Error()), Err: syscall.EACCES}
	}
	return errors.New(msg)
}

func readAll(f *os.File) ([]byte, error) {
	var out []byte
	buf := make([]byte, 512)
	for {
		n, err := f.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			return out, err
		}
	}
}

// startUnsupervised starts cmd in a process group of its own, where there
// is no supervisor: only Wait and the caller's kills end the group.
func startUnsupervised(ctx context.Context, cmd *exec.Cmd) (*Process, error) {
	if l := LeashFrom(ctx); l != nil && l.Closed() {
		return nil, ErrLeashClosed
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &Process{Cmd: cmd, Pgid: cmd.Process.Pid}, nil
}

// endLine closes the lifeline unless the leash already did.
func (p *Process) endLine() {
	p.once.Do(func() {
		if p.line == nil {
			return
		}
		if p.leash == nil || p.leash.detach(p.line) {
			p.line.Close()
		}
	})
}

// Why Wait stopped waiting.
const (
	StopExited   = ""         // the process exited by itself
	StopTimeout  = "timeout"  // the timeout passed and the group was killed
	StopCanceled = "canceled" // ctx was done and the group was killed
)

// Wait waits for the command to exit. When the timeout passes (timeout > 0)
// or ctx is done first, it sends SIGTERM to the whole process group and
// SIGKILL after grace. Once the command has exited it sends SIGKILL to the
// group again, so nothing the command started in its group outlives it, and
// ends the supervision. It returns the command's exit status and why it
// stopped waiting (StopExited, StopTimeout or StopCanceled).
func (p *Process) Wait(ctx context.Context, timeout, grace time.Duration) (*os.ProcessState, string) {
	defer p.endLine()
	waitDone := make(chan struct{})
	go func() {
		// Exits when the supervisor exits, which it does when the command
		// does; the group kill below guarantees it.
		defer close(waitDone)
		p.Cmd.Wait()
	}()
	var timer <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
	}
	reason := StopExited
	select {
	case <-waitDone:
	case <-timer:
		reason = StopTimeout
	case <-ctx.Done():
		reason = StopCanceled
	}
	if reason != StopExited {
		p.signal(syscall.SIGTERM)
		g := time.NewTimer(grace)
		select {
		case <-waitDone:
		case <-g.C:
		}
		g.Stop()
		p.signal(syscall.SIGKILL)
		<-waitDone
	}
	// Sweep anything left in the group (a background child of a script
	// that exited). ESRCH when the group is already empty.
	syscall.Kill(-p.Pgid, syscall.SIGKILL)
	return p.Cmd.ProcessState, reason
}

// signal sends sig to the group, waking it first if a lapsed deadline
// stopped it (a stopped process acts on SIGTERM only once continued).
func (p *Process) signal(sig syscall.Signal) {
	syscall.Kill(-p.Pgid, sig)
	if sig != syscall.SIGKILL {
		syscall.Kill(-p.Pgid, syscall.SIGCONT)
	}
}

// Kill kills the process group at once; Wait still reaps it.
func (p *Process) Kill() { syscall.Kill(-p.Pgid, syscall.SIGKILL) }

// selfExe is this binary, for re-executing it as a supervisor. On Linux
// /proc/self/exe works even when the file was replaced since it started.
func selfExe() string {
	if _, err := os.Stat("/proc/self/exe"); err == nil {
		return "/proc/self/exe"
	}
	exe, err := os.Executable()
	if err != nil {
		return os.Args[0]
	}
	return exe
}

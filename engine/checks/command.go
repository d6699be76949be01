package checks

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"homework/engine/proc"
	"homework/engine/spec"
)

// killGrace is how long a command check's process group has between
// SIGTERM and SIGKILL.
const killGrace = time.Second

func runCommand(ctx context.Context, c spec.CheckSpec, env Env) spec.CheckResult {
	if len(c.Argv) == 0 || c.Argv[0] == "" {
		return errored("The command check has no argv.")
	}
	if env.Workdir == "" {
		return errored("Command checks need a work directory (command runs only).")
	}
	timeout := DefaultTimeout
	if c.TimeoutMS > 0 {
		timeout = time.Duration(c.TimeoutMS) * time.Millisecond
	}
	tailN := env.OutputTailBytes
	if tailN <= 0 {
		tailN = DefaultOutputTailBytes
	}

	r, w, err := os.Pipe()
	if err != nil {
		return errored("Cannot run %s: %v.", c.Argv[0], err)
	}
	cmd := exec.Command(c.Argv[0], c.Argv[1:]...)
	cmd.Dir = env.Workdir
	cmd.Env = env.Environ
	cmd.Stdout, cmd.Stderr = w, w
	// Under the attempt's leash (ctx): the check ends with the server and
	// with the attempt's hold on the run.
	p, err := proc.Start(ctx, cmd)
	w.Close() // the child holds its own copy
	if err != nil {
		r.Close()
		return errored("Cannot run %s: %v.", c.Argv[0], err)
	}

	tail := NewTail(tailN)
	readDone := make(chan struct{})
	go func() {
		// Exits at EOF, when every holder of the pipe is gone, or when r is
		// closed below.
		defer close(readDone)
		io.Copy(tail, r)
	}()

	status, reason := p.Wait(ctx, timeout, killGrace)
	select {
	case <-readDone:
	case <-time.After(killGrace):
		// Someone outside the group still holds the pipe.
	}
	r.Close()
	<-readDone

	res := spec.CheckResult{OutputTail: tail.String()}
	switch reason {
	case proc.StopTimeout:
		res.Message = fmt.Sprintf("%s timed out after %s.", strings.Join(c.Argv, " "), timeout)
	case proc.StopCanceled:
		res.Errored = true
		res.Message = fmt.Sprintf("%s was interrupted: %v.", strings.Join(c.Argv, " "), context.Cause(ctx))
	default:
		if status.Success() {
			res.Passed = true
			res.Message = fmt.Sprintf("%s exited 0.", strings.Join(c.Argv, " "))
		} else {
			res.Message = fmt.Sprintf("%s failed: %s.", strings.Join(c.Argv, " "), DescribeExit(status))
		}
	}
	return res
}

// DescribeExit describes a process's exit status in words: "exit status 2"
// or "killed by signal terminated".
func DescribeExit(st *os.ProcessState) string {
	if st == nil {
		return "did not start"
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "killed by signal " + ws.Signal().String()
	}
	return fmt.Sprintf("exit status %d", st.ExitCode())
}

// Tail is an io.Writer that keeps the last n bytes written to it and counts
// the rest. It is not safe for concurrent use.
type Tail struct {
	buf     []byte
	n       int
	written int64
}

// NewTail returns a Tail that keeps the last n bytes.
func NewTail(n int) *Tail {
	return &Tail{n: n}
}

// Write implements io.Writer; it never fails.
func (t *Tail) Write(p []byte) (int, error) {
	t.written += int64(len(p))
	if len(p) >= t.n {
		t.buf = append(t.buf[:0], p[len(p)-t.n:]...)
		return len(p), nil
	}
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.n; over > 0 {
		// Shift rather than grow: buf never exceeds 2n.
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// Bytes returns the kept bytes, the last n written. The slice is valid until
// the next Write.
func (t *Tail) Bytes() []byte { return t.buf }

// Written returns how many bytes were written in all.
func (t *Tail) Written() int64 { return t.written }

// String returns the kept bytes, starting at a rune boundary and marked with
// "…" when earlier output was dropped.
func (t *Tail) String() string {
	b := t.buf
	if t.written > int64(len(b)) {
		i := 0
		for i < len(b) && i < utf8.UTFMax && !utf8.RuneStart(b[i]) {
			i++
		}
		return "…" + string(b[i:])
	}
	return string(b)
}

var _ io.Writer = (*Tail)(nil)

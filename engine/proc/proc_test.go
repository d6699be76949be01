package proc

import (
	"bufio"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"homework/engine/waitfor"
)

// The test binary doubles as a "server" that starts a supervised command
// and then waits to be killed: TestMain runs it when the variable is set.
const serverEnv = "HOMEWORK_PROC_TEST_SERVER"

func TestMain(m *testing.M) {
	if script := os.Getenv(serverEnv); script != "" {
		os.Exit(fakeServer(script))
	}
	os.Exit(m.Run())
}

// fakeServer starts sh -c script under a leash (with no deadline unless
// HOMEWORK_PROC_TEST_LEASE_MS is set), renews nothing and waits forever.
func fakeServer(script string) int {
	ctx := context.Background()
	if ms, err := strconv.Atoi(os.Getenv("HOMEWORK_PROC_TEST_LEASE_MS")); err == nil {
		ctx = WithLeash(ctx, NewLeash(time.Duration(ms)*time.Millisecond))
	}
	cmd := exec.Command("sh", "-c", script)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	p, err := Start(ctx, cmd)
	if err != nil {
		os.Stderr.WriteString(err.Error())
		return 3
	}
	p.Wait(context.Background(), 0, time.Second)
	return 0
}

// pids reads the pids a script wrote, one per line, waiting for n of them.
func pids(t *testing.T, r *bufio.Reader, n int) []int {
	t.Helper()
	var out []int
	for len(out) < n {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("read pids: %v (have %v)", err, out)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(line))
		if err != nil {
			t.Fatalf("not a pid: %q", line)
		}
		out = append(out, pid)
	}
	return out
}

// waitState waits for pid to reach one of the states, up to d.
func waitState(t *testing.T, pid int, d time.Duration, states string) string {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		s := waitfor.ProcessState(pid)
		if s != "" && strings.Contains(states, s) {
			return s
		}
		if time.Now().After(deadline) {
			return s
		}
		<-tick.C
	}
}

func TestStartMirrorsTheCommandsEnd(t *testing.T) {
	t.Run("an exit code is the command's", func(t *testing.T) {
		p, err := Start(context.Background(), exec.Command("sh", "-c", "exit 7"))
		if err != nil {
			t.Fatal(err)
		}
		st, reason := p.Wait(context.Background(), 0, time.Second)
		if reason != StopExited || st.ExitCode() != 7 {
			t.Fatalf("got %v %q, want exit status 7", st, reason)
		}
	})
	t.Run("a signal that killed the command is the supervisor's", func(t *testing.T) {
		p, err := Start(context.Background(), exec.Command("sh", "-c", "kill -TERM $$"))
		if err != nil {
			t.Fatal(err)
		}
		st, _ := p.Wait(context.Background(), 0, time.Second)
		ws := st.Sys().(syscall.WaitStatus)
		if !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
			t.Fatalf("got %v, want killed by SIGTERM", st)
		}
	})
	t.Run("stdin, stdout, the work directory and the environment reach the command", func(t *testing.T) {
		dir := t.TempDir()
		cmd := exec.Command("sh", "-c", `read x; echo "$x $(pwd) $FOO"`)
		cmd.Dir, cmd.Env = dir, []string{"FOO=bar", "PATH=" + os.Getenv("PATH")}
		cmd.Stdin = strings.NewReader("hello\n")
		var out strings.Builder
		cmd.Stdout = &out
		p, err := Start(context.Background(), cmd)
		if err != nil {
			t.Fatal(err)
		}
		p.Wait(context.Background(), 0, time.Second)
		want := "hello " + dir + " bar\n"
		if out.String() != want {
			t.Fatalf("got %q, want %q", out.String(), want)
		}
	})
	t.Run("a command that cannot start fails like cmd.Start", func(t *testing.T) {
		_, err := Start(context.Background(), exec.Command("no-such-program-here"))
		if !errors.Is(err, exec.ErrNotFound) {
			t.Fatalf("got %v, want exec.ErrNotFound", err)
		}
		dir := t.TempDir()
		cmd := exec.Command("./missing.sh")
		cmd.Dir = dir
		if _, err := Start(context.Background(), cmd); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("got %v, want fs.ErrNotExist", err)
		}
		os.WriteFile(filepath.Join(dir, "noexec.sh"), []byte("#!/bin/sh\n"), 0o644)
		cmd = exec.Command("./noexec.sh")
		cmd.Dir = dir
		if _, err := Start(context.Background(), cmd); !errors.Is(err, fs.ErrPermission) {
			t.Fatalf("got %v, want fs.ErrPermission", err)
		}
	})
	t.Run("a timeout kills the whole group", func(t *testing.T) {
		r, w, _ := os.Pipe()
		defer r.Close()
		cmd := exec.Command("sh", "-c", `sleep 100 & echo $!; echo $$; wait`)
		cmd.Stdout = w
		p, err := Start(context.Background(), cmd)
		w.Close()
		if err != nil {
			t.Fatal(err)
		}
		ps := pids(t, bufio.NewReader(r), 2)
		_, reason := p.Wait(context.Background(), 50*time.Millisecond, 100*time.Millisecond)
		if reason != StopTimeout {
			t.Fatalf("reason %q, want timeout", reason)
		}
		for _, pid := range ps {
			if !waitfor.Gone(pid, time.Second) {
				t.Fatalf("pid %d of the group outlived the timeout", pid)
			}
		}
	})
}

func TestLeash(t *testing.T) {
	t.Run("closing the leash kills the group, grandchildren included", func(t *testing.T) {
		l := NewLeash(time.Hour)
		r, w, _ := os.Pipe()
		defer r.Close()
		cmd := exec.Command("sh", "-c", `sh -c 'sleep 100' & echo $!; echo $$; wait`)
		cmd.Stdout = w
		p, err := Start(WithLeash(context.Background(), l), cmd)
		w.Close()
		if err != nil {
			t.Fatal(err)
		}
		ps := pids(t, bufio.NewReader(r), 2)
		l.Close()
		for _, pid := range ps {
			if !waitfor.Gone(pid, time.Second) {
				t.Fatalf("pid %d outlived the leash", pid)
			}
		}
		st, _ := p.Wait(context.Background(), 0, time.Second)
		if ws := st.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("got %v, want killed", st)
		}
		if _, err := Start(WithLeash(context.Background(), l), exec.Command("true")); !errors.Is(err, ErrLeashClosed) {
			t.Fatalf("start under a closed leash: %v, want ErrLeashClosed", err)
		}
	})
	t.Run("a lapsed deadline stops the group and an extension continues it", func(t *testing.T) {
		l := NewLeash(200 * time.Millisecond)
		r, w, _ := os.Pipe()
		defer r.Close()
		cmd := exec.Command("sh", "-c", `sleep 100 & echo $!; wait`)
		cmd.Stdout = w
		p, err := Start(WithLeash(context.Background(), l), cmd)
		w.Close()
		if err != nil {
			t.Fatal(err)
		}
		defer p.Wait(context.Background(), time.Nanosecond, time.Second)
		child := pids(t, bufio.NewReader(r), 1)[0]
		if s := waitState(t, child, 5*time.Second, "T"); s != "T" {
			t.Fatalf("state %q after the deadline, want T (stopped)", s)
		}
		if s := waitState(t, p.Pgid, time.Second, "T"); s != "T" {
			t.Fatalf("the leader's state %q, want T (stopped)", s)
		}
		l.Extend(time.Hour)
		if s := waitState(t, child, 5*time.Second, "SR"); s != "S" && s != "R" {
			t.Fatalf("state %q after the extension, want running or sleeping", s)
		}
	})
	t.Run("a frozen leash stops the group at once until it is extended", func(t *testing.T) {
		l := NewLeash(time.Hour)
		r, w, _ := os.Pipe()
		defer r.Close()
		cmd := exec.Command("sh", "-c", `sleep 100 & echo $!; wait`)
		cmd.Stdout = w
		p, err := Start(WithLeash(context.Background(), l), cmd)
		w.Close()
		if err != nil {
			t.Fatal(err)
		}
		defer p.Wait(context.Background(), time.Nanosecond, time.Second)
		child := pids(t, bufio.NewReader(r), 1)[0]
		l.Freeze()
		if s := waitState(t, child, 5*time.Second, "T"); s != "T" {
			t.Fatalf("state %q after Freeze, want T (stopped)", s)
		}
		l.Freeze() // a second freeze keeps it stopped
		l.Extend(time.Hour)
		if s := waitState(t, child, 5*time.Second, "SR"); s != "S" && s != "R" {
			t.Fatalf("state %q after the extension, want running or sleeping", s)
		}
	})
	t.Run("a command under a renewed leash runs to its end", func(t *testing.T) {
		l := NewLeash(300 * time.Millisecond)
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					l.Extend(300 * time.Millisecond)
				}
			}
		}()
		p, err := Start(WithLeash(context.Background(), l), exec.Command("sh", "-c", "sleep 1; exit 3"))
		if err != nil {
			t.Fatal(err)
		}
		st, _ := p.Wait(context.Background(), 0, time.Second)
		close(stop)
		<-done
		if st.ExitCode() != 3 {
			t.Fatalf("got %v, want exit status 3", st)
		}
	})
}

// TestServerDeathKillsTheGroup kills (SIGKILL) a process that started a
// supervised command, and asserts that the command and its background
// child are gone within a second, before anything else could start.
func TestServerDeathKillsTheGroup(t *testing.T) {
	for _, leased := range []bool{false, true} {
		name := "without a leash"
		if leased {
			name = "under a leash"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			marker := filepath.Join(dir, "done")
			exe, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			server := exec.Command(exe, "-test.run=^$")
			server.Env = append(os.Environ(), serverEnv+`=sleep 100 & echo $!; echo $$; sleep 2; touch `+marker+`; wait`)
			if leased {
				server.Env = append(server.Env, "HOMEWORK_PROC_TEST_LEASE_MS=3600000")
			}
			r, w, _ := os.Pipe()
			defer r.Close()
			server.Stdout, server.Stderr = w, os.Stderr
			if err := server.Start(); err != nil {
				t.Fatal(err)
			}
			w.Close()
			ps := pids(t, bufio.NewReader(r), 2)
			server.Process.Kill()
			server.Wait()
			for _, pid := range ps {
				if !waitfor.Gone(pid, time.Second) {
					t.Fatalf("pid %d outlived its server by more than a second", pid)
				}
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("the command wrote its marker after its server died")
			}
		})
	}
}

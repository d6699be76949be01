package proc

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
	"unsafe"
)

// init turns this binary into a supervisor when Start re-executed it:
// argv is [supervisorArg0, remaining-ms, path, argv...], fd 3 the lifeline,
// fd 4 the status pipe. It never returns then. Any binary that can call
// Start links this package, so the server and every test binary can
// supervise. Package initialisation runs on the main goroutine locked to the
// main thread, which lives as long as the process: the parent-death signal
// set on the command is tied to that thread.
func init() {
	if len(os.Args) < 4 || os.Args[0] != supervisorArg0 {
		return
	}
	os.Exit(supervise(os.Args[1:]))
}

// supervise starts the command and watches it and the lifeline; it returns
// the exit code to leave with after mirroring a fatal signal.
func supervise(args []string) int {
	ms, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil {
		ms = noDeadline
	}
	line := os.NewFile(3, "lifeline")
	status := os.NewFile(4, "status")
	// Neither may reach the command.
	syscall.CloseOnExec(3)
	syscall.CloseOnExec(4)

	env := os.Environ()
	if raceEnabled && len(env) > 0 && env[len(env)-1] == raceExitEnv {
		env = env[:len(env)-1] // Start's, not the command's
	}
	cmd := &exec.Cmd{Path: args[1], Args: args[2:], Env: env, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(status, "err %s", err)
		status.Close()
		return 127
	}
	pgid := cmd.Process.Pid
	fmt.Fprintf(status, "ok %d", pgid)
	status.Close()

	msgs := make(chan time.Duration)
	eof := make(chan struct{})
	go func() {
		// Exits at EOF: the server died or ended the supervision.
		defer close(eof)
		var b [8]byte
		for {
			if _, err := io.ReadFull(line, b[:]); err != nil {
				return
			}
			msgs <- time.Duration(binary.BigEndian.Uint64(b[:])) * time.Millisecond
		}
	}()
	waitDone := make(chan struct{})
	go func() {
		// Exits when the command exits.
		defer close(waitDone)
		cmd.Wait()
	}()

	var timer *time.Timer
	var lapse <-chan time.Time
	setDeadline := func(d time.Duration) {
		if timer != nil {
			timer.Stop()
		}
		lapse = nil
		if d >= 0 {
			timer = time.NewTimer(d)
			lapse = timer.C
		}
	}
	if ms >= 0 {
		setDeadline(time.Duration(ms) * time.Millisecond)
	}
	stopped := false
	for {
		select {
		case <-waitDone:
			return mirror(cmd.ProcessState)
		case <-eof:
			syscall.Kill(-pgid, syscall.SIGKILL)
			<-waitDone
			return mirror(cmd.ProcessState)
		case d := <-msgs:
			if d <= 0 {
				// Frozen by the owner: stop now, whatever the deadline.
				setDeadline(-1)
				if !stopped {
					syscall.Kill(-pgid, syscall.SIGSTOP)
					stopped = true
				}
				continue
			}
			setDeadline(d)
			if stopped {
				syscall.Kill(-pgid, syscall.SIGCONT)
				stopped = false
			}
		case <-lapse:
			// The owner could not renew in time: nothing may happen until it
			// does, or until it gives the run up.
			syscall.Kill(-pgid, syscall.SIGSTOP)
			stopped = true
			lapse = nil
		}
	}
}

// mirror returns st's exit code, or first dies of the signal that killed
// the command, so the server sees the command's own end.
func mirror(st *os.ProcessState) int {
	ws, ok := st.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return st.ExitCode()
	}
	sig := ws.Signal()
	// No core file of ours, and the default action, not the Go runtime's.
	syscall.Setrlimit(syscall.RLIMIT_CORE, &syscall.Rlimit{})
	var act [4]uint64 // struct sigaction with SIG_DFL, no flags, empty mask
	syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0)
	syscall.Kill(os.Getpid(), sig)
	time.Sleep(100 * time.Millisecond)
	return 128 + int(sig)
}

// supervised says Start runs commands under a supervisor (Linux: the
// parent-death signal and /proc/self/exe).
const supervised = true

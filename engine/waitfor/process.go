package waitfor

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Gone waits up to d for process pid to be gone (exited, or a zombie) and
// reports whether it is. A pidfd becomes readable when its process exits,
// whoever its parent is, so the wait is on that event; only a kernel
// without pidfd_open (before 5.3) is polled.
func Gone(pid int, d time.Duration) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	switch {
	case errors.Is(err, unix.ESRCH):
		return true // gone and reaped
	case err == nil:
		defer unix.Close(fd)
		if ProcessGone(pid) {
			return true // a zombie: exited before the pidfd was opened
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			n, err := unix.Poll(fds, int(d.Milliseconds()))
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return err == nil && n > 0
		}
	}
	deadline := time.Now().Add(d)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !ProcessGone(pid) {
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
	return true
}

// ProcessGone reports whether pid no longer runs (gone or a zombie).
func ProcessGone(pid int) bool {
	st := ProcessState(pid)
	return st == "" || st == "Z" || st == "X"
}

// ProcessState returns pid's state letter from /proc (R, S, T, Z, …), or
// "" when there is no such process.
func ProcessState(pid int) string {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return ""
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// The state follows the parenthesised command name.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return ""
	}
	return s[i+2 : i+3]
}

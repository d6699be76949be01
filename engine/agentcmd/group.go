package agentcmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Files under <workdir>/.homework that keep one agent per work directory.
const (
	// LockFile is flocked by the attempt running an agent in the work
	// directory, from before the agent starts until its group is gone.
	LockFile = ".homework/lock"
	// GroupFile records the running agent's process group ("pgid
	// starttime") so that the next attempt, after a crash of the server that
	// started it, kills that group and waits for it to be gone first.
	GroupFile = ".homework/agent.pgid"
)

// workdirLock is the held lock on a work directory.
type workdirLock struct{ f *os.File }

// lockWorkdir takes the work directory's lock, waiting while another
// attempt (of this or another process) holds it, until ctx ends.
func lockWorkdir(ctx context.Context, wd string) (*workdirLock, error) {
	f, err := os.OpenFile(filepath.Join(wd, LockFile), os.O_CREATE|os.O_RDWR|syscall.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("agentcmd: open work directory lock: %w", err)
	}
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return &workdirLock{f: f}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("agentcmd: lock work directory: %w", err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("agentcmd: waiting for the work directory lock: %w", context.Cause(ctx))
		case <-t.C:
		}
	}
}

func (l *workdirLock) unlock() {
	syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	l.f.Close()
}

// recordGroup writes the agent's process group to GroupFile.
func recordGroup(wd string, pgid int) error {
	st, _ := processStart(pgid)
	path := filepath.Join(wd, GroupFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(fmt.Sprintf("%d %d\n", pgid, st)), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func forgetGroup(wd string) { os.Remove(filepath.Join(wd, GroupFile)) }

// reapOrphanGroup kills the process group an earlier attempt recorded and
// did not clear (its server was killed while the agent ran), and waits
// until the group is gone. It returns the pgid it killed, or 0.
func reapOrphanGroup(ctx context.Context, wd string) (int, error) {
	b, err := os.ReadFile(filepath.Join(wd, GroupFile))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	} else if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		forgetGroup(wd)
		return 0, nil
	}
	pgid, err1 := strconv.Atoi(f[0])
	start, err2 := strconv.ParseUint(f[1], 10, 64)
	if err1 != nil || err2 != nil || pgid <= 1 {
		forgetGroup(wd)
		return 0, nil
	}
	if st, ok := processStart(pgid); ok && start != 0 && st != start {
		// The leader's pid now names another process: not our group.
		forgetGroup(wd)
		return 0, nil
	}
	if !groupAlive(pgid) {
		forgetGroup(wd) // it died with its server
		return 0, nil
	}
	// A pid is not reused while a group of that id has members, so a live
	// group here is the orphaned agent's (its leader may have exited).
	for {
		syscall.Kill(-pgid, syscall.SIGKILL)
		if !groupAlive(pgid) {
			break
		}
		select {
		case <-ctx.Done():
			return pgid, fmt.Errorf("agentcmd: waiting for the previous agent's group %d to exit: %w", pgid, context.Cause(ctx))
		case <-time.After(20 * time.Millisecond):
		}
	}
	forgetGroup(wd)
	return pgid, nil
}

// processStart returns the start time (clock ticks since boot) of pid from
// /proc, and whether pid exists.
func processStart(pid int) (uint64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the command name may hold spaces
	if i < 0 {
		return 0, true
	}
	f := strings.Fields(s[i+1:])
	// Fields after the name start at field 3 (state); starttime is field 22.
	if len(f) < 20 {
		return 0, true
	}
	v, _ := strconv.ParseUint(f[19], 10, 64)
	return v, true
}

// groupAlive reports whether any process of group pgid is still running (a
// zombie waiting for a parent that does not reap is not).
func groupAlive(pgid int) bool {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return syscall.Kill(-pgid, 0) == nil
	}
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		// f[0] is the state, f[2] the process group.
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" && f[0] != "X" {
			return true
		}
	}
	return false
}

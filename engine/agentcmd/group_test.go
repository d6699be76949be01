package agentcmd

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

func TestReapOrphanGroupKillsTheRecordedGroupAndWaits(t *testing.T) {
	wd := t.TempDir()
	os.MkdirAll(filepath.Join(wd, ".homework"), 0o755)
	// A leader that starts a child in its group and exits: the group
	// outlives its leader, as an agent's does.
	cmd := exec.Command("sh", "-c", "sleep 60 & echo started")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	t.Cleanup(func() { syscall.Kill(-pgid, syscall.SIGKILL) })
	if err := recordGroup(wd, pgid); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if !groupAlive(pgid) {
		t.Fatal("the group's background child is not running")
	}
	got, err := reapOrphanGroup(context.Background(), wd)
	if err != nil || got != pgid {
		t.Fatalf("reap = %d, %v; want %d", got, err, pgid)
	}
	if groupAlive(pgid) {
		t.Fatal("the orphaned group is still running after reap returned")
	}
	if _, err := os.Stat(filepath.Join(wd, GroupFile)); !os.IsNotExist(err) {
		t.Fatalf("the group file is still there: %v", err)
	}
	// Nothing recorded: nothing to do.
	if got, err := reapOrphanGroup(context.Background(), wd); got != 0 || err != nil {
		t.Fatalf("second reap = %d, %v", got, err)
	}
}

func TestReapOrphanGroupLeavesAReusedPidAlone(t *testing.T) {
	wd := t.TempDir()
	os.MkdirAll(filepath.Join(wd, ".homework"), 0o755)
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	t.Cleanup(func() { syscall.Kill(-pgid, syscall.SIGKILL); cmd.Wait() })
	// Recorded with another start time: the pid now names another process.
	st, _ := processStart(pgid)
	os.WriteFile(filepath.Join(wd, GroupFile), []byte(itoa(pgid)+" "+itoa(int(st)+1)+"\n"), 0o644)
	if got, err := reapOrphanGroup(context.Background(), wd); got != 0 || err != nil {
		t.Fatalf("reap = %d, %v", got, err)
	}
	if !groupAlive(pgid) {
		t.Fatal("a process that only reuses the recorded pid was killed")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestWorkdirLockIsExclusive(t *testing.T) {
	wd := t.TempDir()
	os.MkdirAll(filepath.Join(wd, ".homework"), 0o755)
	first, err := lockWorkdir(context.Background(), wd)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := lockWorkdir(ctx, wd); err == nil {
		t.Fatal("a second attempt took the lock while the first held it")
	}
	got := make(chan error, 1)
	go func() {
		l, err := lockWorkdir(context.Background(), wd)
		if err == nil {
			l.unlock()
		}
		got <- err
	}()
	first.unlock()
	if err := <-got; err != nil {
		t.Fatalf("the lock was not free after unlock: %v", err)
	}
}

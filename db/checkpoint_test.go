package db

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The writer never checkpoints (wal_autocheckpoint is off on it, so a
// checkpoint's fsyncs do not hold every writer behind it); the
// checkpointer must then keep the WAL from growing with every commit.
func TestTheWALIsCheckpointedOffTheWritePath(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ckpt.db")
	d, err := Open(ctx, Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var auto int
	if err := d.Writer().QueryRowContext(ctx, `PRAGMA wal_autocheckpoint`).Scan(&auto); err != nil {
		t.Fatal(err)
	}
	if auto != 0 {
		t.Fatalf("the writer's wal_autocheckpoint is %d, want 0", auto)
	}
	u, _ := d.CreateUser(ctx, "a@example.com", "h", false)
	run := newRun(t, d, u.ID, "r1")
	const commits = 8000
	peak := int64(0)
	for i := 0; i < commits; i++ {
		if _, err := d.AppendEvent(ctx, run.ID, "tool_call", map[string]int{"i": i}); err != nil {
			t.Fatal(err)
		}
		if i%100 == 0 {
			if fi, err := os.Stat(path + "-wal"); err == nil {
				peak = max(peak, fi.Size())
			}
			time.Sleep(time.Millisecond) // a server's commits come with pauses
		}
	}
	// Without checkpoints every commit adds its pages to the WAL: about
	// 8000 × 4 pages × 4 KiB = 128 MiB. Checkpointed, the WAL starts over
	// soon after restartFrames (16 MiB): well under half that.
	if peak > 64<<20 {
		t.Fatalf("the WAL grew to %d bytes over %d commits: nothing checkpoints it", peak, commits)
	}
	t.Logf("WAL peak over %d commits: %d KiB", commits, peak>>10)
}

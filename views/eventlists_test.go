package views

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestEventListsAreCurrent: the generated lists match spec.Events (run go
// generate in views/ after changing it).
func TestEventListsAreCurrent(t *testing.T) {
	src, err := EventListsGo()
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string][]byte{"events_gen.go": src, filepath.Join("..", "static", "js", "events.gen.js"): EventListsJS()} {
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run go generate in views/", path)
		}
	}
}

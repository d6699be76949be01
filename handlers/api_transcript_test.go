package handlers

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"homework/engine"
	"homework/engine/scripted"
	"homework/engine/spec"
)

// transcriptLines fetches an iteration's transcript as JSON lines.
func (ts *testServer) transcriptLines(t *testing.T, u *testUser, runID string, n int) ([]map[string]any, *http.Response) {
	t.Helper()
	resp, body := ts.request(t, u, "GET", fmt.Sprintf("/api/runs/%s/iterations/%d/transcript", runID, n), nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("transcript: %d %s", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/x-ndjson") {
		t.Fatalf("content type %q", ct)
	}
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 8<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out, resp
}

func TestTranscriptAPI(t *testing.T) {
	ts := newTestServer(t, nil)
	alice, bob := ts.user(t, "alice@example.com"), ts.user(t, "bob@example.com")
	step := doneStep("wrote it")
	step.Output = "the verdict is in"
	step.Transcript = []scripted.Line{
		{Kind: spec.TranscriptAssistant, Text: "I will write the report."},
		{Kind: spec.TranscriptToolCall, Name: "workspace_write", Text: `{"path":"report.md","content":"# R"}`},
		{Kind: spec.TranscriptToolResult, Name: "workspace_write", Text: "written report.md"},
	}
	step.Stream = "agent says hi\n"
	step.StreamRepeat = 3
	var created struct {
		RunID string `json:"run_id"`
	}
	ts.expect(t, alice, "POST", "/api/runs", map[string]any{"objective": "write", "executor": "script", "script": script(step),
		"completion": map[string]any{"checks": []map[string]any{{"type": "content_pattern", "name": "verdict", "pattern": "verdict", "target": "output"}}}},
		http.StatusCreated, &created)
	runID := created.RunID
	ts.waitStatus(t, alice, runID, spec.StatusCompleted)

	t.Run("JSON lines hold every entry in order, the streamed output and the check", func(t *testing.T) {
		lines, _ := ts.transcriptLines(t, alice, runID, 1)
		var kinds []string
		for _, l := range lines {
			kinds = append(kinds, l["kind"].(string))
		}
		if got := strings.Join(kinds, ","); got != "assistant,tool_call,tool_result,output,check" {
			t.Fatalf("kinds = %s", got)
		}
		if lines[1]["text"] != `{"path":"report.md","content":"# R"}` || lines[1]["name"] != "workspace_write" {
			t.Fatalf("tool call line = %v", lines[1])
		}
		if lines[3]["text"] != strings.Repeat("agent says hi\n", 3) {
			t.Fatalf("output line = %q", lines[3]["text"])
		}
		if !strings.Contains(lines[4]["text"].(string), "verdict passed") {
			t.Fatalf("check line = %q", lines[4]["text"])
		}
	})
	t.Run("after a seq only later lines come", func(t *testing.T) {
		resp, body := ts.request(t, alice, "GET", "/api/runs/"+runID+"/iterations/1/transcript?after=3", nil)
		if resp.StatusCode != 200 || strings.Count(string(body), "\n") != 2 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	})
	t.Run("text/plain is readable text", func(t *testing.T) {
		resp, body := ts.request(t, alice, "GET", "/api/runs/"+runID+"/iterations/1/transcript", nil, "Accept", "text/plain")
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
			t.Fatalf("%d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		for _, want := range []string{"tool_call workspace_write", `{"path":"report.md","content":"# R"}`, "agent says hi", "check verdict"} {
			if !strings.Contains(string(body), want) {
				t.Fatalf("text lacks %q:\n%s", want, body)
			}
		}
	})
	t.Run("the live stream announced the lines", func(t *testing.T) {
		var page struct {
			Events []*spec.Event `json:"events"`
		}
		ts.expect(t, alice, "GET", "/api/runs/"+runID+"/events", nil, 200, &page)
		n, ended := 0, false
		for _, e := range page.Events {
			switch e.Type {
			case spec.EventTranscript:
				if ended {
					t.Fatal("a transcript event came after the run ended")
				}
				n++
			case "run_completed":
				ended = true
			}
		}
		if n == 0 {
			t.Fatalf("no %s events in %d events", spec.EventTranscript, len(page.Events))
		}
	})
	t.Run("another user's run is 404", func(t *testing.T) {
		ts.expectError(t, bob, "GET", "/api/runs/"+runID+"/iterations/1/transcript", nil, 404, spec.ENOTFOUND, "")
		ts.expectError(t, bob, "GET", "/api/runs/"+runID+"/iterations", nil, 404, spec.ENOTFOUND, "")
	})
	t.Run("hostile input is a JSON error naming the field", func(t *testing.T) {
		ts.expectError(t, alice, "GET", "/api/runs/"+runID+"/iterations/x/transcript", nil, 400, spec.EINVALID, "iteration")
		ts.expectError(t, alice, "GET", "/api/runs/"+runID+"/iterations/1/transcript?after=-1", nil, 400, spec.EINVALID, "after")
		ts.expectError(t, alice, "GET", "/api/runs/"+runID+"/iterations?cursor=zzz", nil, 400, spec.EINVALID, "cursor")
		ts.expectError(t, alice, "GET", "/api/runs/"+runID+"/iterations?limit=0", nil, 400, spec.EINVALID, "limit")
	})
}

func TestTranscriptCapIsShownWithTheDroppedBytes(t *testing.T) {
	ts := newTestServer(t, nil)
	alice := ts.user(t, "alice@example.com")
	step := doneStep("noisy")
	chunk := strings.Repeat("0123456789abcde\n", 4096) // 64 KiB
	step.Stream = chunk
	step.StreamRepeat = 48 // 3 MiB, over the 2 MiB cap
	runID := ts.createRun(t, alice, step)
	ts.waitStatus(t, alice, runID, spec.StatusCompleted)

	lines, resp := ts.transcriptLines(t, alice, runID, 1)
	dropped, _ := strconv.ParseInt(resp.Header.Get("X-Transcript-Dropped-Bytes"), 10, 64)
	capBytes, _ := strconv.ParseInt(resp.Header.Get("X-Transcript-Cap-Bytes"), 10, 64)
	if capBytes != engine.TranscriptCapBytes || capBytes < 1<<20 {
		t.Fatalf("cap = %d", capBytes)
	}
	kept := 0
	for _, l := range lines {
		if l["kind"] == "output" {
			kept += len(l["text"].(string))
		}
	}
	if total := int64(len(chunk) * 48); int64(kept)+dropped != total || kept != engine.TranscriptCapBytes {
		t.Fatalf("kept %d + dropped %d, want %d in all with %d kept", kept, dropped, total, engine.TranscriptCapBytes)
	}
	last := lines[len(lines)-1]
	if last["kind"] != "truncated" || int64(last["dropped_bytes"].(float64)) != dropped {
		t.Fatalf("last line = %v", last)
	}
}

func TestIterationsArePaged(t *testing.T) {
	ts := newTestServer(t, nil)
	alice := ts.user(t, "alice@example.com")
	steps := make([]scripted.Step, 5)
	for i := range steps {
		steps[i] = scripted.Step{Summary: fmt.Sprint("step ", i+1), Transcript: []scripted.Line{{Kind: "note", Text: "n"}}}
	}
	steps[4] = doneStep("done")
	runID := ts.createRun(t, alice, steps...)
	ts.waitStatus(t, alice, runID, spec.StatusCompleted)
	var seen []int
	cursor := ""
	for pages := 0; ; pages++ {
		var page IterationPageJSON
		ts.expect(t, alice, "GET", "/api/runs/"+runID+"/iterations?order=desc&limit=2&cursor="+cursor, nil, 200, &page)
		for _, it := range page.Iterations {
			seen = append(seen, it.Iteration)
			if it.Transcript == nil || (it.Iteration < 5 && it.Transcript.Lines != 1) {
				t.Fatalf("iteration %d transcript %+v", it.Iteration, it.Transcript)
			}
		}
		if page.NextCursor == nil {
			break
		}
		cursor = *page.NextCursor
		if pages > 5 {
			t.Fatal("paging does not end")
		}
	}
	if fmt.Sprint(seen) != "[5 4 3 2 1]" {
		t.Fatalf("seen %v", seen)
	}
}

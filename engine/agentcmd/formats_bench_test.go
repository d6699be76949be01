package agentcmd_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"homework/engine/agentcmd"
)

// bigCodexOutput is codex JSON events (0.73 MiB for 900 commands): n commands with
// their output, stderr noise between them, one turn's usage.
func bigCodexOutput(n int) string {
	var b strings.Builder
	b.WriteString(`{"type":"thread.started","thread_id":"t"}` + "\n" + `{"type":"turn.started"}` + "\n")
	out := strings.Repeat(`ok  \texample/pkg\t0.003s\n`, 20)
	for i := range n {
		fmt.Fprintf(&b, `{"type":"item.started","item":{"id":"item_%d","type":"command_execution","command":"go test ./...","aggregated_output":"","status":"in_progress"}}`+"\n", i)
		fmt.Fprintf(&b, `{"type":"item.completed","item":{"id":"item_%d","type":"command_execution","command":"go test ./...","aggregated_output":"%s","exit_code":0,"status":"completed"}}`+"\n", i, out)
		if i%10 == 0 {
			b.WriteString("2026-11-24T10:00:00Z WARN codex_core: a log line on stderr\n")
		}
	}
	b.WriteString(`{"type":"item.completed","item":{"id":"msg","type":"agent_message","text":"done"}}` + "\n")
	b.WriteString(`{"type":"turn.completed","usage":{"input_tokens":120000,"cached_input_tokens":100000,"output_tokens":3000,"reasoning_output_tokens":1800}}` + "\n")
	return b.String()
}

// BenchmarkParseOutput measures reading 0.73 MiB of codex output against
// the raw limit measured in the same run: decoding every line into a
// generic map, which is the least any reader of JSON lines does.
func BenchmarkParseOutput(b *testing.B) {
	output := bigCodexOutput(900)
	// ns/op counts both; the metrics below separate them.
	b.ResetTimer()
	var parse, raw time.Duration
	for range b.N {
		start := time.Now()
		if p := agentcmd.ParseOutput(agentcmd.FormatCodexJSON, output); !p.OK || len(p.ToolUses) != 900 {
			b.Fatalf("parsed %d tool uses, ok %v", len(p.ToolUses), p.OK)
		}
		parse += time.Since(start)
		start = time.Now()
		for l := range strings.SplitSeq(output, "\n") {
			var v map[string]any
			json.Unmarshal([]byte(l), &v)
		}
		raw += time.Since(start)
	}
	per, rawPer := parse/time.Duration(b.N), raw/time.Duration(b.N)
	b.ReportMetric(float64(len(output))/per.Seconds()/(1<<20), "MiB/s")
	b.ReportMetric(float64(len(output))/rawPer.Seconds()/(1<<20), "raw-MiB/s")
	b.ReportMetric(per.Seconds()/rawPer.Seconds(), "ratio")
}

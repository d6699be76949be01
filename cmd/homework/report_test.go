package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestReportCommand(t *testing.T) {
	m, tok := testMain(t)
	done := createRun(t, m, tok, `{"objective":"report me","executor":"script","tags":["before"],"script":{"steps":[
		{"summary":"done","status":{"exit_signal":true,"completion_evidence":["did it"],"progress_summary":"done"},
		 "llm":[{"role":"executor","model":"gpt-test","PromptTokens":100,"CompletionTokens":20,"CostUSD":0.25,"Priced":true}]}]}}`)
	stalled := createRun(t, m, tok, `{"objective":"spin","executor":"script","tags":["after"],"script":{"steps":[{"summary":"same","progress":"same"}]}}`)
	waitStatus(t, m, done, "completed")
	waitStatus(t, m, stalled, "stopped")
	env := func(k string) string {
		switch k {
		case "HOMEWORK_SERVER":
			return "http://" + m.Addr()
		case "HOMEWORK_TOKEN":
			return tok
		}
		return ""
	}
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := report(context.Background(), args, env, &out)
		return out.String(), err
	}

	t.Run("the table prints the figures per group", func(t *testing.T) {
		out, err := run("--group-by", "tag")
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if fields := strings.Fields(lines[0]); len(fields) != 4 || fields[0] != "tag" || fields[1] != "all" || fields[2] != "after" || fields[3] != "before" {
			t.Fatalf("header = %q", lines[0])
		}
		for _, want := range [][]string{
			{"runs", "2", "1", "1"},
			{"completion_rate", "50.0%", "0.0%", "100.0%"},
			{"iterations_p50", "1", "3", "1"},
			{"cost_usd_total", "0.2500", "0.0000", "0.2500"},
		} {
			found := false
			for _, l := range lines {
				if f := strings.Fields(l); len(f) == 4 && f[0] == want[0] {
					found = strings.Join(f, " ") == strings.Join(want, " ")
					if !found {
						t.Errorf("row %q, want %q", l, want)
					}
				}
			}
			if !found {
				t.Errorf("no row %q in\n%s", want, out)
			}
		}
		if !strings.Contains(out, "no_progress=1") {
			t.Errorf("stop reasons missing:\n%s", out)
		}
	})

	t.Run("json is the API's answer and csv one row per group", func(t *testing.T) {
		out, err := run("--format", "json", "--since", time.Now().UTC().AddDate(0, 0, -1).Format(time.DateOnly), "--until", time.Now().UTC().Format(time.DateOnly))
		if err != nil {
			t.Fatal(err)
		}
		var ans struct {
			Runs           int     `json:"runs"`
			CompletionRate float64 `json:"completion_rate"`
		}
		if err := json.Unmarshal([]byte(out), &ans); err != nil || ans.Runs != 2 || ans.CompletionRate != 0.5 {
			t.Fatalf("json = %s (%v)", out, err)
		}
		out, err = run("--format", "csv", "--group-by", "executor", "--tag", "after")
		if err != nil {
			t.Fatal(err)
		}
		recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
		if err != nil || len(recs) != 3 || recs[0][0] != "executor" || recs[1][0] != "all" || recs[2][0] != "script" || recs[1][1] != "1" {
			t.Fatalf("csv = %q (%v)", out, err)
		}
	})

	t.Run("bad input is refused with the field", func(t *testing.T) {
		if _, err := run("--group-by", "colour"); err == nil || !strings.Contains(err.Error(), "group_by") {
			t.Fatalf("bad group-by: %v", err)
		}
		if _, err := run("--format", "xml"); err == nil {
			t.Fatal("bad format accepted")
		}
		var ue *usageError
		err := report(context.Background(), nil, func(string) string { return "" }, &bytes.Buffer{})
		if !errors.As(err, &ue) {
			t.Fatalf("no token: %v, want a usage error", err)
		}
		if _, err := run("--token", "wrong"); err == nil {
			t.Fatal("a wrong token was accepted")
		}
	})
}

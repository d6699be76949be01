package prices_test

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"homework/engine/llm/prices"
)

func TestLookup(t *testing.T) {
	table := prices.Default()
	tests := []struct {
		model string
		want  string // the table key expected, "" for unpriced
	}{
		// The models people run with today's CLIs, under the names the
		// CLIs report.
		{"gpt-5-codex", "gpt-5-codex"},
		{"gpt-5.1-codex", "gpt-5.1-codex"},
		{"gpt-5.1-codex-max", "gpt-5.1-codex-max"},
		{"gpt-5.2-codex", "gpt-5.2-codex"},
		{"claude-opus-4-5-20251101", "claude-opus-4-5-20251101"},
		{"claude-opus-4-5", "claude-opus-4-5"},
		{"claude-sonnet-4-5-20250929", "claude-sonnet-4-5-20250929"},
		{"claude-haiku-4-5-20251001", "claude-haiku-4-5-20251001"},
		{"gemini-2.5-pro", "gemini-2.5-pro"},
		{"gemini-2.5-flash", "gemini-2.5-flash"},
		{"gemini-3-pro-preview", "gemini-3-pro-preview"},
		{"GPT-4o-Mini", "gpt-4o-mini"},
		{"openai/gpt-4o-mini", "gpt-4o-mini"}, // no OpenRouter entry: the bare name
		{"openai/gpt-4.1-nano-2025-04-14", "gpt-4.1-nano-2025-04-14"},
		{"openai/gpt-5-codex", "openai/gpt-5-codex"}, // OpenRouter's own entry
		{"anthropic/claude-sonnet-4.5", "anthropic/claude-sonnet-4.5"},
		{"vertex_ai/gemini-2.0-flash-001", "vertex_ai/gemini-2.0-flash-001"},
		{"o3-pro-2025-06-10", "o3-pro-2025-06-10"},
		// Exact names only: close names are unpriced, never guessed.
		{"o3-pro-preview", ""},
		{"gpt-4o-mini-2099-01-01", ""},
		{"gpt-5-codex-preview", ""},
		{"claude-opus-4-5-20990101", ""},
		{"gpt-4oo", ""},
		{"llama3.1:8b", ""},
		{"", ""},
	}
	for _, tt := range tests {
		got, key, ok := table.Lookup(tt.model)
		if tt.want == "" {
			if ok {
				t.Errorf("Lookup(%q) = %s %+v, want unpriced", tt.model, key, got)
			}
			continue
		}
		if !ok || key != tt.want {
			t.Errorf("Lookup(%q) = %q, %v; want %q", tt.model, key, ok, tt.want)
		}
	}
	// Pro models are priced as themselves, never as their base model.
	for _, model := range []string{"o1-pro", "o3-pro", "gpt-5-pro"} {
		base := strings.TrimSuffix(model, "-pro")
		if table[model].Input <= table[base].Input {
			t.Errorf("%s (%+v) is priced no higher than %s (%+v)", model, table[model], base, table[base])
		}
	}
	if src, asOf := prices.Source(); !strings.Contains(src, "litellm") || len(asOf) != len("2006-01-02") {
		t.Errorf("the built-in prices name no source or date: %q %q", src, asOf)
	}
}

func TestCost(t *testing.T) {
	sonnet := prices.Price{Input: 3, Output: 15, CacheRead: 0.3, CacheWrite: 3.75, CacheWrite1h: 6,
		Above: &prices.Tier{Tokens: 200_000, Input: 6, Output: 22.5, CacheRead: 0.6, CacheWrite: 7.5, CacheWrite1h: 12}}
	flash := prices.Price{Input: 0.3, Output: 2.5, CacheRead: 0.03, Reasoning: 3.5}
	plain := prices.Price{Input: 2, Output: 8}
	for _, tc := range []struct {
		name  string
		price prices.Price
		usage prices.Usage
		want  float64
	}{
		{"uncached input and output at their rates", plain, prices.Usage{Input: 1_000_000, Output: 1_000_000}, 10},
		{"cache reads and writes at theirs, the rest of the prompt at the input rate", sonnet,
			prices.Usage{Input: 100_000, CacheRead: 60_000, CacheWrite: 20_000, CacheWrite1h: 10_000, Output: 1_000},
			(10_000*3 + 60_000*0.3 + 20_000*3.75 + 10_000*6 + 1_000*15) / 1e6},
		{"a prompt over the threshold is priced whole at the tier's rates", sonnet,
			prices.Usage{Input: 250_000, CacheRead: 50_000, Output: 2_000},
			(200_000*6 + 50_000*0.6 + 2_000*22.5) / 1e6},
		{"a prompt at the threshold is not", sonnet, prices.Usage{Input: 200_000, Output: 1_000}, (200_000*3 + 1_000*15) / 1e6},
		{"the tier is judged per request when several are summed", sonnet,
			prices.Usage{Input: 300_000, Output: 3_000, Requests: 3}, (300_000*3 + 3_000*15) / 1e6},
		{"reasoning is output, at the reasoning rate when one is listed", flash,
			prices.Usage{Input: 10_000, CacheRead: 4_000, Output: 5_000, Reasoning: 3_000},
			(6_000*0.3 + 4_000*0.03 + 2_000*2.5 + 3_000*3.5) / 1e6},
		{"without cache rates cached tokens cost the input rate", plain, prices.Usage{Input: 1_000, CacheRead: 600, CacheWrite: 400}, 1_000 * 2 / 1e6},
		{"no tokens cost nothing", sonnet, prices.Usage{}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.price.Cost(tc.usage); math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("Cost(%+v) = %v, want %v", tc.usage, got, tc.want)
			}
		})
	}

	t.Run("the built-in prices of the models the recordings name are the list prices", func(t *testing.T) {
		table := prices.Default()
		for model, want := range map[string]prices.Rates{
			"gpt-5-codex":               {Input: 1.25, Output: 10, CacheRead: 0.125, CacheWrite: 1.25, CacheWrite1h: 1.25, Reasoning: 10},
			"claude-opus-4-5-20251101":  {Input: 5, Output: 25, CacheRead: 0.5, CacheWrite: 6.25, CacheWrite1h: 10, Reasoning: 25},
			"claude-haiku-4-5-20251001": {Input: 1, Output: 5, CacheRead: 0.1, CacheWrite: 1.25, CacheWrite1h: 2, Reasoning: 5},
			"gemini-2.5-pro":            {Input: 1.25, Output: 10, CacheRead: 0.125, CacheWrite: 1.25, CacheWrite1h: 1.25, Reasoning: 10},
		} {
			p, _, ok := table.Lookup(model)
			if got := p.Rates(1000); !ok || got != want {
				t.Errorf("%s rates %+v, want %+v", model, got, want)
			}
		}
		p, _, _ := table.Lookup("gemini-2.5-pro")
		if r := p.Rates(300_000); !r.Tiered || r.Input != 2.5 || r.Output != 15 {
			t.Errorf("gemini-2.5-pro over 200k tokens: %+v", r)
		}
	})
}

// TestTableIsGeneratedFromTheExtract regenerates table.json from
// extract.json and compares: the table is never edited by hand, and every
// figure is litellm's per-token price times one million.
func TestTableIsGeneratedFromTheExtract(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go command is not on PATH")
	}
	dir := t.TempDir()
	extract, err := os.ReadFile("extract.json")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "extract.json"), extract, 0o644)
	out, err := exec.Command("go", "run", "./gen", "-dir", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("go run ./gen: %v\n%s", err, out)
	}
	fresh, _ := os.ReadFile(filepath.Join(dir, "table.json"))
	committed, _ := os.ReadFile("table.json")
	if !bytes.Equal(fresh, committed) {
		t.Fatal("table.json is not what `go generate ./engine/llm/prices` makes of extract.json: regenerate it")
	}

	var x struct {
		Models map[string]map[string]any `json:"models"`
	}
	if err := json.Unmarshal(extract, &x); err != nil {
		t.Fatal(err)
	}
	table := prices.Default()
	for key, litellmKey := range map[string]string{"gpt-5-codex": "gpt-5-codex", "claude-opus-4-5-20251101": "claude-opus-4-5-20251101",
		"gemini-2.5-pro": "gemini/gemini-2.5-pro", "vertex_ai/gemini-2.5-pro": "gemini-2.5-pro", "anthropic/claude-sonnet-4.5": "openrouter/anthropic/claude-sonnet-4.5"} {
		e := x.Models[litellmKey]
		p := table[key]
		for field, got := range map[string]float64{"input_cost_per_token": p.Input, "output_cost_per_token": p.Output, "cache_read_input_token_cost": p.CacheRead} {
			want, _ := e[field].(float64)
			if math.Abs(got-want*1e6) > 1e-9 {
				t.Errorf("%s %s = %v per 1M, extract says %v per token", key, field, got, want)
			}
		}
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "prices.json")
	os.WriteFile(good, []byte(`{"gpt-4o": {"input": 1, "output": 2}, "My-Model": {"input": 0.5, "output": 1.5, "cache_read": 0.05,
		"cache_write": 0.6, "cache_write_1h": 1, "reasoning": 2, "above": {"tokens": 128000, "input": 1, "output": 3}}}`), 0o644)
	table, err := prices.Load(good)
	if err != nil {
		t.Fatal(err)
	}
	if p := table["gpt-4o"]; p.Input != 1 || p.Output != 2 || p.CacheRead != 0 {
		t.Errorf("the old {input, output} form: %+v", p)
	}
	my := table["my-model"]
	if my.CacheRead != 0.05 || my.CacheWrite != 0.6 || my.CacheWrite1h != 1 || my.Reasoning != 2 || my.Above == nil || my.Above.Tokens != 128000 || my.Above.Output != 3 {
		t.Errorf("the full form: %+v %+v", my, my.Above)
	}
	if _, _, ok := table.Lookup("gpt-5-codex"); !ok {
		t.Error("the file replaced the built-in table instead of extending it")
	}
	for name, body := range map[string]string{
		"not json":                 `{"gpt-4o": `,
		"negative price":           `{"x": {"input": -1, "output": 1}}`,
		"unknown field":            `{"x": {"in": 1}}`,
		"tier without a threshold": `{"x": {"input": 1, "output": 1, "above": {"input": 2}}}`,
		"null entry":               `{"x": null}`,
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".json")
		os.WriteFile(p, []byte(body), 0o644)
		if _, err := prices.Load(p); err == nil || !strings.Contains(err.Error(), "price file") {
			t.Errorf("%s: err = %v", name, err)
		}
	}
	if _, err := prices.Load(filepath.Join(dir, "missing.json")); err == nil {
		t.Error("missing file accepted")
	}
}

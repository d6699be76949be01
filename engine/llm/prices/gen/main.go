// Command gen builds the built-in price table from a dated extract of
// litellm's model_prices_and_context_window.json.
//
// It has two steps. With -from it reads the whole litellm file and writes the
// extract (extract.json): the chat models of OpenAI, Anthropic and Google
// (Gemini API and Vertex AI) and the OpenRouter names of those providers'
// models, each with only the price fields we use, under a header naming the
// source, the upstream commit (when known) and the date of the data. Without
// -from (what `go generate` runs) it turns the extract into table.json: our
// names, in US dollars per million tokens. No figure is ever typed by hand:
// every number in table.json is a number of extract.json times one million.
//
// Refresh:
//
//	go run ./engine/llm/prices/gen -dir engine/llm/prices -from litellm.json -source "…" -commit SHA -date 2026-07-24
//	go generate ./engine/llm/prices
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Extract is extract.json.
type Extract struct {
	Source string `json:"source"`
	// Commit is the upstream commit of the data, when it is known.
	Commit string `json:"commit"`
	// Date is the date of the upstream data (YYYY-MM-DD).
	Date string `json:"date"`
	// Retrieved is when the extract was made.
	Retrieved string `json:"retrieved"`
	Note      string `json:"note"`
	// Models are litellm's entries, by litellm's key, with only the fields
	// in keptFields.
	Models map[string]map[string]json.RawMessage `json:"models"`
}

// keptFields are the litellm fields the extract keeps; tier fields
// (…_above_NNNk_tokens) are kept too.
var keptFields = map[string]bool{
	"litellm_provider": true, "mode": true,
	"input_cost_per_token": true, "output_cost_per_token": true,
	"cache_read_input_token_cost": true, "cache_creation_input_token_cost": true,
	"cache_creation_input_token_cost_above_1hr": true, "output_cost_per_reasoning_token": true,
}

var tierField = regexp.MustCompile(`^(input_cost_per_token|output_cost_per_token|cache_read_input_token_cost|cache_creation_input_token_cost|cache_creation_input_token_cost_above_1hr)_above_(\d+)k_tokens$`)

func main() {
	from := flag.String("from", "", "the whole litellm model_prices_and_context_window.json: write extract.json from it")
	source := flag.String("source", "", "with -from: where the file comes from")
	commit := flag.String("commit", "", "with -from: its upstream commit, if known")
	date := flag.String("date", "", "with -from: the date of its data (YYYY-MM-DD)")
	retrieved := flag.String("retrieved", "", "with -from: when it was retrieved (YYYY-MM-DD)")
	dir := flag.String("dir", ".", "the prices package directory")
	flag.Parse()
	if *from != "" {
		if err := writeExtract(*from, filepath.Join(*dir, "extract.json"), Extract{Source: *source, Commit: *commit, Date: *date, Retrieved: *retrieved}); err != nil {
			fail(err)
		}
	}
	if err := writeTable(filepath.Join(*dir, "extract.json"), filepath.Join(*dir, "table.json")); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gen:", err)
	os.Exit(1)
}

// selected reports whether litellm's entry key is a chat model of a
// provider we price.
func selected(key string, e map[string]json.RawMessage) bool {
	var provider, mode string
	json.Unmarshal(e["litellm_provider"], &provider)
	json.Unmarshal(e["mode"], &mode)
	if _, ok := e["input_cost_per_token"]; !ok {
		return false
	}
	if _, ok := e["output_cost_per_token"]; !ok {
		return false
	}
	switch provider {
	case "openai":
		return (mode == "chat" || mode == "responses") && !strings.HasPrefix(key, "ft:") && !strings.Contains(key, "/")
	case "anthropic":
		return mode == "chat"
	case "gemini":
		return mode == "chat"
	case "vertex_ai-language-models", "vertex_ai":
		return mode == "chat" && strings.HasPrefix(strings.TrimPrefix(key, "vertex_ai/"), "gemini-")
	case "openrouter":
		return mode == "chat" && (strings.HasPrefix(key, "openrouter/openai/") || strings.HasPrefix(key, "openrouter/anthropic/") || strings.HasPrefix(key, "openrouter/google/"))
	}
	return false
}

func writeExtract(from, to string, hdr Extract) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		return fmt.Errorf("%s: %w", from, err)
	}
	hdr.Note = "litellm's entries for the chat models of OpenAI, Anthropic and Google (Gemini API, Vertex AI) and the OpenRouter names of those providers' models, with only the price fields Homework uses. Prices are US dollars per token, as litellm gives them. Regenerate with the command in gen/main.go; never edit by hand."
	hdr.Models = map[string]map[string]json.RawMessage{}
	for key, raw := range all {
		var e map[string]json.RawMessage
		if json.Unmarshal(raw, &e) != nil {
			continue // sample_spec's siblings that are not entries
		}
		if !selected(key, e) {
			continue
		}
		kept := map[string]json.RawMessage{}
		for f, v := range e {
			if keptFields[f] || tierField.MatchString(f) {
				kept[f] = v
			}
		}
		hdr.Models[key] = kept
	}
	return writeJSON(to, hdr)
}

// Price is one model's price in table.json: US dollars per million tokens.
// It mirrors prices.Price (the generator is its own program).
type Price struct {
	Provider     string  `json:"provider,omitempty"`
	Input        float64 `json:"input"`
	Output       float64 `json:"output"`
	CacheRead    float64 `json:"cache_read,omitempty"`
	CacheWrite   float64 `json:"cache_write,omitempty"`
	CacheWrite1h float64 `json:"cache_write_1h,omitempty"`
	Reasoning    float64 `json:"reasoning,omitempty"`
	Above        *Tier   `json:"above,omitempty"`
}

// Tier is a price for requests whose prompt exceeds Tokens.
type Tier struct {
	Tokens       int64   `json:"tokens"`
	Input        float64 `json:"input,omitempty"`
	Output       float64 `json:"output,omitempty"`
	CacheRead    float64 `json:"cache_read,omitempty"`
	CacheWrite   float64 `json:"cache_write,omitempty"`
	CacheWrite1h float64 `json:"cache_write_1h,omitempty"`
}

// Table is table.json.
type Table struct {
	Source    string           `json:"source"`
	Commit    string           `json:"commit"`
	AsOf      string           `json:"as_of"`
	Retrieved string           `json:"retrieved"`
	Unit      string           `json:"unit"`
	Note      string           `json:"note"`
	Models    map[string]Price `json:"models"`
}

// tableName returns the name a litellm key is priced under: the model name
// a CLI or endpoint reports (Gemini API models without "gemini/", OpenRouter
// models without "openrouter/"), Vertex AI's Gemini models as
// "vertex_ai/<model>". rank orders sources that give the same name (lower
// wins).
func tableName(key, provider string) (name string, rank int) {
	switch provider {
	case "gemini":
		if strings.HasPrefix(key, "gemini/") {
			return strings.TrimPrefix(key, "gemini/"), 0
		}
		return key, 1
	case "vertex_ai-language-models", "vertex_ai":
		return "vertex_ai/" + strings.TrimPrefix(key, "vertex_ai/"), 0
	case "openrouter":
		return strings.TrimPrefix(key, "openrouter/"), 0
	}
	return key, 0
}

func writeTable(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	var x Extract
	if err := json.Unmarshal(b, &x); err != nil {
		return fmt.Errorf("%s: %w", from, err)
	}
	t := Table{Source: x.Source, Commit: x.Commit, AsOf: x.Date, Retrieved: x.Retrieved, Unit: "USD per 1,000,000 tokens",
		Note:   "Generated by gen/main.go from extract.json: do not edit. Names are exact; a model not listed is unpriced.",
		Models: map[string]Price{}}
	rank := map[string]int{}
	keys := make([]string, 0, len(x.Models))
	for k := range x.Models {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		p, provider, err := convert(x.Models[key])
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		if p.Input == 0 && p.Output == 0 {
			continue // a placeholder, not a price
		}
		name, r := tableName(key, provider)
		if old, ok := rank[name]; ok && old <= r {
			continue
		}
		rank[name] = r
		p.Provider = provider
		t.Models[name] = p
	}
	return writeJSON(to, t)
}

// convert turns litellm's per-token fields into a Price per million tokens.
func convert(e map[string]json.RawMessage) (Price, string, error) {
	var p Price
	var provider string
	json.Unmarshal(e["litellm_provider"], &provider)
	base := map[string]*float64{
		"input_cost_per_token": &p.Input, "output_cost_per_token": &p.Output,
		"cache_read_input_token_cost": &p.CacheRead, "cache_creation_input_token_cost": &p.CacheWrite,
		"cache_creation_input_token_cost_above_1hr": &p.CacheWrite1h, "output_cost_per_reasoning_token": &p.Reasoning,
	}
	var tier Tier
	tierDst := map[string]*float64{
		"input_cost_per_token": &tier.Input, "output_cost_per_token": &tier.Output,
		"cache_read_input_token_cost": &tier.CacheRead, "cache_creation_input_token_cost": &tier.CacheWrite,
		"cache_creation_input_token_cost_above_1hr": &tier.CacheWrite1h,
	}
	for f, raw := range e {
		dst := base[f]
		if m := tierField.FindStringSubmatch(f); m != nil {
			k, _ := strconv.ParseInt(m[2], 10, 64)
			if tier.Tokens != 0 && tier.Tokens != k*1000 {
				return p, "", fmt.Errorf("two thresholds, %d and %d tokens", tier.Tokens, k*1000)
			}
			tier.Tokens = k * 1000
			dst = tierDst[m[1]]
		}
		if dst == nil {
			continue
		}
		v, err := perMillion(raw)
		if err != nil {
			return p, "", fmt.Errorf("%s: %w", f, err)
		}
		*dst = v
	}
	if tier.Tokens != 0 {
		p.Above = &tier
	}
	return p, provider, nil
}

// perMillion returns a per-token price times one million, rounded to a
// millionth of a dollar (litellm's figures are decimal; float products are
// not).
func perMillion(raw json.RawMessage) (float64, error) {
	var v float64
	if err := json.Unmarshal(raw, &v); err != nil {
		return 0, err
	}
	if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("not a price: %s", raw)
	}
	return math.Round(v*1e12) / 1e6, nil
}

func writeJSON(path string, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

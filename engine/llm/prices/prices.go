// Package prices is the price table of model calls: a table generated from a
// dated extract of litellm's model_prices_and_context_window.json (see
// gen/main.go and the README's "Prices"), what an operator's --prices file
// adds, and the arithmetic that turns a call's tokens into US dollars.
//
// Cost = uncached input × input + cache reads × cache_read + cache writes ×
// cache_write (cache_write_1h for one-hour writes) + output × output, where
// reasoning tokens are output (at the reasoning rate when one is listed). A
// request whose prompt exceeds a model's tier threshold (Above.Tokens) is
// priced whole at the tier's rates.
package prices

//go:generate go run ./gen

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"sync"
)

// Price is a model's price in US dollars per million tokens. A rate left at
// zero falls back: CacheRead and CacheWrite to Input, CacheWrite1h to
// CacheWrite, Reasoning to Output, and each rate of Above to the base rate.
type Price struct {
	// Provider is where the figure comes from (litellm's provider name for
	// the built-in table); informational.
	Provider     string  `json:"provider,omitempty"`
	Input        float64 `json:"input"`
	Output       float64 `json:"output"`
	CacheRead    float64 `json:"cache_read,omitempty"`
	CacheWrite   float64 `json:"cache_write,omitempty"`
	CacheWrite1h float64 `json:"cache_write_1h,omitempty"`
	Reasoning    float64 `json:"reasoning,omitempty"`
	// Above is the long-context tier, when the provider prices requests
	// with larger prompts differently.
	Above *Tier `json:"above,omitempty"`
}

// Tier is the price of a request whose prompt exceeds Tokens input tokens.
type Tier struct {
	Tokens       int64   `json:"tokens"`
	Input        float64 `json:"input,omitempty"`
	Output       float64 `json:"output,omitempty"`
	CacheRead    float64 `json:"cache_read,omitempty"`
	CacheWrite   float64 `json:"cache_write,omitempty"`
	CacheWrite1h float64 `json:"cache_write_1h,omitempty"`
}

// Usage is what one model call (or several, summed) used.
type Usage struct {
	// Input counts every prompt token: uncached, read from the cache and
	// written to it.
	Input int64
	// CacheRead is the part of Input read from the prompt cache.
	CacheRead int64
	// CacheWrite is the part of Input written to the cache with the
	// default (five-minute) lifetime; CacheWrite1h with the one-hour one.
	CacheWrite   int64
	CacheWrite1h int64
	// Output counts every output token, reasoning included.
	Output int64
	// Reasoning is the part of Output spent reasoning.
	Reasoning int64
	// Requests is how many model requests these tokens add up; 0 means
	// one. The long-context tier is judged on the prompt per request.
	Requests int
}

// Uncached returns the prompt tokens neither read from nor written to the
// cache.
func (u Usage) Uncached() int64 {
	return max(0, u.Input-u.CacheRead-u.CacheWrite-u.CacheWrite1h)
}

// Rates are the rates a request is charged at, after fallbacks and tiers.
type Rates struct {
	Input, Output, CacheRead, CacheWrite, CacheWrite1h, Reasoning float64
	// Tiered says the long-context tier applies.
	Tiered bool
}

// Rates returns the rates a request of promptTokens input tokens is charged
// at.
func (p Price) Rates(promptTokens int64) Rates {
	r := Rates{Input: p.Input, Output: p.Output, CacheRead: or(p.CacheRead, p.Input), CacheWrite: or(p.CacheWrite, p.Input)}
	r.CacheWrite1h = or(p.CacheWrite1h, r.CacheWrite)
	r.Reasoning = or(p.Reasoning, p.Output)
	if a := p.Above; a != nil && a.Tokens > 0 && promptTokens > a.Tokens {
		r.Tiered = true
		r.Input = or(a.Input, r.Input)
		r.Output = or(a.Output, r.Output)
		r.CacheRead = or(a.CacheRead, r.CacheRead)
		r.CacheWrite = or(a.CacheWrite, r.CacheWrite)
		r.CacheWrite1h = or(a.CacheWrite1h, r.CacheWrite1h)
		if p.Reasoning == 0 {
			r.Reasoning = r.Output
		}
	}
	return r
}

func or(v, fallback float64) float64 {
	if v == 0 {
		return fallback
	}
	return v
}

// Cost returns what u costs at p, in US dollars.
func (p Price) Cost(u Usage) float64 {
	perRequest := u.Input
	if u.Requests > 1 {
		perRequest = u.Input / int64(u.Requests)
	}
	r := p.Rates(perRequest)
	reasoning := min(max(u.Reasoning, 0), max(u.Output, 0))
	usd := float64(u.Uncached())*r.Input + float64(u.CacheRead)*r.CacheRead +
		float64(u.CacheWrite)*r.CacheWrite + float64(u.CacheWrite1h)*r.CacheWrite1h +
		float64(max(u.Output, 0)-reasoning)*r.Output + float64(reasoning)*r.Reasoning
	return usd / 1e6
}

// Table maps model names (lower case) to their prices.
type Table map[string]Price

// tableJSON is the built-in table, generated from extract.json.
//
//go:embed table.json
var tableJSON []byte

// tableDoc is table.json.
type tableDoc struct {
	Source    string           `json:"source"`
	Commit    string           `json:"commit"`
	AsOf      string           `json:"as_of"`
	Retrieved string           `json:"retrieved"`
	Unit      string           `json:"unit"`
	Note      string           `json:"note"`
	Models    map[string]Price `json:"models"`
}

var builtin = sync.OnceValues(func() (tableDoc, error) {
	var d tableDoc
	dec := json.NewDecoder(bytes.NewReader(tableJSON))
	dec.DisallowUnknownFields()
	err := dec.Decode(&d)
	return d, err
})

// Source returns where the built-in prices come from and the date of their
// data.
func Source() (source, asOf string) {
	d, _ := builtin()
	return d.Source, d.AsOf
}

// Default returns a fresh table of the built-in prices.
func Default() Table {
	d, err := builtin()
	if err != nil {
		panic("prices: the embedded table.json is invalid: " + err.Error())
	}
	t := make(Table, len(d.Models))
	for name, p := range d.Models {
		t[strings.ToLower(name)] = p
	}
	return t
}

// Load reads a price file, a JSON object of model name to a Price (at least
// {"input", "output"}; every field of the built-in table is accepted), and
// returns the built-in table with the file's entries merged over it.
func Load(path string) (Table, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read price file: %w", err)
	}
	var raw map[string]*Price
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("price file %s: expected {\"model\": {\"input\": 2.5, \"output\": 10, \"cache_read\": 0.25}} (USD per 1M tokens): %w", path, err)
	}
	t := Default()
	for name, p := range raw {
		name = strings.ToLower(strings.TrimSpace(name))
		if name == "" {
			return nil, fmt.Errorf("price file %s: empty model name", path)
		}
		if err := p.validate(); err != nil {
			return nil, fmt.Errorf("price file %s: model %q: %w", path, name, err)
		}
		t[name] = *p
	}
	return t, nil
}

func (p *Price) validate() error {
	if p == nil {
		return fmt.Errorf("no price given")
	}
	rates := []float64{p.Input, p.Output, p.CacheRead, p.CacheWrite, p.CacheWrite1h, p.Reasoning}
	if a := p.Above; a != nil {
		if a.Tokens <= 0 {
			return fmt.Errorf("above.tokens must be a positive number of input tokens")
		}
		rates = append(rates, a.Input, a.Output, a.CacheRead, a.CacheWrite, a.CacheWrite1h)
	}
	for _, r := range rates {
		if r < 0 || math.IsNaN(r) || math.IsInf(r, 0) {
			return fmt.Errorf("prices must be non-negative numbers")
		}
	}
	return nil
}

// Lookup returns the price of model and the table key it was found under:
// its exact (case-insensitive) name, else the same name without a provider
// prefix on either side ("openai/gpt-4o-mini" finds "gpt-4o-mini", and
// "gemini-2.5-pro" would find "vertex_ai/gemini-2.5-pro" if it had no price
// of its own). Nothing else matches: "o3-pro" never gets "o3"'s price, nor
// an unlisted dated variant its family's.
func (t Table) Lookup(model string) (Price, string, bool) {
	name := strings.ToLower(strings.TrimSpace(model))
	if name == "" {
		return Price{}, "", false
	}
	if p, ok := t[name]; ok {
		return p, name, true
	}
	bare := stripProvider(name)
	if p, ok := t[bare]; ok {
		return p, bare, true
	}
	// Keys under another provider prefix: the alphabetically first, so the
	// result never depends on map order.
	var keys []string
	for k := range t {
		if stripProvider(k) == bare {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return Price{}, "", false
	}
	sort.Strings(keys)
	return t[keys[0]], keys[0], true
}

// Cost returns the cost in US dollars of u on model, and whether the model
// has a price. An unpriced model costs 0 and must be shown as unpriced.
func (t Table) Cost(model string, u Usage) (float64, bool) {
	p, _, ok := t.Lookup(model)
	if !ok {
		return 0, false
	}
	return p.Cost(u), true
}

func stripProvider(name string) string {
	if i := strings.LastIndex(name, "/"); i >= 0 {
		return name[i+1:]
	}
	return name
}

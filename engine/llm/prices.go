package llm

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
)

// Price is a model's price in US dollars per one million tokens.
type Price struct {
	Input  float64 `json:"input"`
	Output float64 `json:"output"`
}

// PriceTable maps model names (lower case) to their prices.
type PriceTable map[string]Price

// DefaultPrices returns a fresh table of built-in prices for common models.
//
// The figures are the providers' published list prices per one million
// input and output tokens at the time of writing. They go stale and do not
// reflect discounts, cached-input rates or batch pricing; operators override
// or extend them with LoadPrices.
func DefaultPrices() PriceTable {
	return PriceTable{
		// OpenAI.
		"gpt-4o":        {Input: 2.50, Output: 10.00},
		"gpt-4o-mini":   {Input: 0.15, Output: 0.60},
		"gpt-4.1":       {Input: 2.00, Output: 8.00},
		"gpt-4.1-mini":  {Input: 0.40, Output: 1.60},
		"gpt-4.1-nano":  {Input: 0.10, Output: 0.40},
		"gpt-4-turbo":   {Input: 10.00, Output: 30.00},
		"gpt-3.5-turbo": {Input: 0.50, Output: 1.50},
		"gpt-5":         {Input: 1.25, Output: 10.00},
		"gpt-5-mini":    {Input: 0.25, Output: 2.00},
		"gpt-5-nano":    {Input: 0.05, Output: 0.40},
		"o1":            {Input: 15.00, Output: 60.00},
		"o1-mini":       {Input: 1.10, Output: 4.40},
		"o3":            {Input: 2.00, Output: 8.00},
		"o3-mini":       {Input: 1.10, Output: 4.40},
		"o4-mini":       {Input: 1.10, Output: 4.40},
		// Anthropic, under their OpenRouter names.
		"anthropic/claude-3.5-sonnet": {Input: 3.00, Output: 15.00},
		"anthropic/claude-3.7-sonnet": {Input: 3.00, Output: 15.00},
		"anthropic/claude-sonnet-4":   {Input: 3.00, Output: 15.00},
		"anthropic/claude-3.5-haiku":  {Input: 0.80, Output: 4.00},
		"anthropic/claude-3-haiku":    {Input: 0.25, Output: 1.25},
		"anthropic/claude-3-opus":     {Input: 15.00, Output: 75.00},
		"anthropic/claude-opus-4":     {Input: 15.00, Output: 75.00},
		// Google, under their OpenRouter names.
		"google/gemini-2.0-flash-001": {Input: 0.10, Output: 0.40},
		"google/gemini-2.5-flash":     {Input: 0.30, Output: 2.50},
		"google/gemini-2.5-pro":       {Input: 1.25, Output: 10.00},
	}
}

// LoadPrices reads a JSON object of model name to {"input": USD per 1M
// tokens, "output": USD per 1M tokens} from path and returns the default
// table with the file's entries merged over it.
func LoadPrices(path string) (PriceTable, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read price file: %w", err)
	}
	var raw map[string]*Price
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("price file %s: expected {\"model\": {\"input\": 2.5, \"output\": 10}}: %w", path, err)
	}
	t := DefaultPrices()
	for name, p := range raw {
		name = strings.ToLower(strings.TrimSpace(name))
		if name == "" {
			return nil, fmt.Errorf("price file %s: empty model name", path)
		}
		if p == nil || p.Input < 0 || p.Output < 0 || math.IsNaN(p.Input) || math.IsNaN(p.Output) {
			return nil, fmt.Errorf("price file %s: model %q: prices must be non-negative numbers", path, name)
		}
		t[name] = *p
	}
	return t, nil
}

// Lookup returns the price of model. It tries the exact name, then the name
// without a provider prefix ("openai/gpt-4o-mini"), then table entries whose
// own provider prefix differs, and finally the longest known name that
// prefixes the model at a separator, which covers dated variants
// ("gpt-4o-mini-2024-07-18").
func (t PriceTable) Lookup(model string) (Price, bool) {
	name := strings.ToLower(strings.TrimSpace(model))
	if name == "" {
		return Price{}, false
	}
	if p, ok := t[name]; ok {
		return p, true
	}
	bare := stripProvider(name)
	if p, ok := t[bare]; ok {
		return p, true
	}
	// Compare without provider prefixes on both sides, choosing the longest
	// (then alphabetically first) key so the result never depends on map order.
	best, bestKey, bestLen := Price{}, "", -1
	for k, p := range t {
		kb := stripProvider(k)
		if kb != bare && !hasBoundaryPrefix(bare, kb) {
			continue
		}
		if len(kb) > bestLen || (len(kb) == bestLen && k < bestKey) {
			best, bestKey, bestLen = p, k, len(kb)
		}
	}
	return best, bestLen >= 0
}

// Cost returns the cost in USD of a call to model, and whether the model has
// a price. An unpriced model costs 0 and must be shown as unpriced.
func (t PriceTable) Cost(model string, prompt, completion int64) (float64, bool) {
	p, ok := t.Lookup(model)
	if !ok {
		return 0, false
	}
	return (float64(prompt)*p.Input + float64(completion)*p.Output) / 1e6, true
}

func stripProvider(name string) string {
	if i := strings.LastIndex(name, "/"); i >= 0 {
		return name[i+1:]
	}
	return name
}

// hasBoundaryPrefix reports whether prefix prefixes s and is followed by a
// separator, so "gpt-4o" matches "gpt-4o-2024-08-06" but "gpt-4" does not
// match "gpt-4o".
func hasBoundaryPrefix(s, prefix string) bool {
	if prefix == "" || len(s) <= len(prefix) || !strings.HasPrefix(s, prefix) {
		return false
	}
	switch s[len(prefix)] {
	case '-', ':', '@', '.', '_':
		return true
	}
	return false
}

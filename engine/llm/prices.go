package llm

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
)

// Price is a model's price in US dollars per one million tokens.
type Price struct {
	Input  float64 `json:"input"`
	Output float64 `json:"output"`
}

// PriceTable maps model names (lower case) to their prices.
type PriceTable map[string]Price

// pricesJSON is the built-in price table: a dated copy of the providers'
// published prices, with its source, kept as data.
//
//go:embed prices.json
var pricesJSON []byte

// priceDoc is prices.json.
type priceDoc struct {
	Source string `json:"source"`
	AsOf   string `json:"as_of"`
	Unit   string `json:"unit"`
	Note   string `json:"note"`
	Models map[string]struct {
		Input   float64  `json:"input"`
		Output  float64  `json:"output"`
		Aliases []string `json:"aliases"`
	} `json:"models"`
}

var builtinPrices = sync.OnceValues(func() (priceDoc, error) {
	var d priceDoc
	dec := json.NewDecoder(bytes.NewReader(pricesJSON))
	dec.DisallowUnknownFields()
	err := dec.Decode(&d)
	return d, err
})

// PricesSource returns where the built-in prices come from and their date.
func PricesSource() (source, asOf string) {
	d, _ := builtinPrices()
	return d.Source, d.AsOf
}

// DefaultPrices returns a fresh table of the built-in prices (prices.json):
// every model under its exact name and each of its dated aliases. The
// figures are list prices; they go stale and do not reflect discounts,
// cached-input rates or batch pricing; operators override or extend them
// with LoadPrices.
func DefaultPrices() PriceTable {
	d, err := builtinPrices()
	if err != nil {
		panic("llm: the embedded prices.json is invalid: " + err.Error())
	}
	t := PriceTable{}
	for name, m := range d.Models {
		p := Price{Input: m.Input, Output: m.Output}
		t[strings.ToLower(name)] = p
		for _, a := range m.Aliases {
			t[strings.ToLower(a)] = p
		}
	}
	return t
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

// Lookup returns the price of model: its exact (case-insensitive) name in
// the table, else the same name without a provider prefix on either side
// ("openai/gpt-4o-mini" and "claude-3.5-sonnet" match "gpt-4o-mini" and
// "anthropic/claude-3.5-sonnet"). Nothing else matches: "o3-pro" does not
// get "o3"'s price, nor an unlisted dated variant its family's.
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
	// Keys under another provider prefix: the alphabetically first, so the
	// result never depends on map order.
	best, bestKey := Price{}, ""
	for k, p := range t {
		if stripProvider(k) == bare && (bestKey == "" || k < bestKey) {
			best, bestKey = p, k
		}
	}
	return best, bestKey != ""
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

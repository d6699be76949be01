package llm

import (
	"homework/engine/llm/prices"
	"homework/engine/spec"
)

// Price is a model's price in US dollars per one million tokens (see
// package prices).
type Price = prices.Price

// PriceTable maps model names (lower case) to their prices.
type PriceTable = prices.Table

// DefaultPrices returns a fresh table of the built-in prices, generated from
// a dated extract of litellm's price list (engine/llm/prices).
func DefaultPrices() PriceTable { return prices.Default() }

// LoadPrices reads a price file (model name to {"input", "output",
// "cache_read", "cache_write", "cache_write_1h", "reasoning", "above"}, USD
// per 1M tokens) and returns the built-in table with its entries merged over
// it.
func LoadPrices(path string) (PriceTable, error) { return prices.Load(path) }

// callUsage returns the prices.Usage of a model call.
func callUsage(c spec.LLMCall) prices.Usage {
	return prices.Usage{Input: c.PromptTokens, CacheRead: c.CachedTokens, CacheWrite: c.CacheWriteTokens,
		Output: c.CompletionTokens, Reasoning: c.ReasoningTokens, Requests: 1}
}

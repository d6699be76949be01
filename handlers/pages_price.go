package handlers

import (
	"github.com/gofiber/fiber/v2"

	"homework/engine/agentcmd"
	"homework/engine/llm/prices"
	"homework/engine/spec"
	"homework/views"
)

// pricePreview says what the composer's form would be priced at: for a
// command run, the model its preset, command or model field names and
// whether its CLI reports cost; for a model run, the run's model or the
// server's default.
func (s *Server) pricePreview(u *spec.User, f views.ComposerForm) views.PricePreview {
	cfg, _ := s.configFromForm(u, f)
	var p views.PricePreview
	if cfg.Executor == spec.ExecutorCommand {
		p.Model, p.How, p.ReportsCost, p.NoUsage = agentcmd.PricedAs(cfg)
	} else {
		p.Model, p.How = cfg.Model, "the run's model"
		if p.Model == "" {
			p.Model, p.How = s.opts.DefaultModel, "the server's default"
		}
	}
	table := s.opts.Prices
	if table == nil {
		table = prices.Default()
	}
	if p.Model == "" {
		return p
	}
	price, _, ok := table.Lookup(p.Model)
	if !ok {
		return p
	}
	r := price.Rates(0)
	p.Priced, p.Input, p.Output, p.CacheRead, p.CacheWrite = true, r.Input, r.Output, r.CacheRead, r.CacheWrite
	if a := price.Above; a != nil {
		t := price.Rates(a.Tokens + 1)
		p.TierTokens, p.TierInput, p.TierOutput = a.Tokens, t.Input, t.Output
	}
	src, asOf := prices.Source()
	p.Source = "price table of " + asOf
	if price.Provider == "" || src == "" {
		p.Source = "the server's price file"
	}
	return p
}

// composerPrice renders the composer's price note for the form's current
// fields (sent as query parameters by the composer as they change).
func (s *Server) composerPrice(c *fiber.Ctx) error {
	return s.render(c, fiber.StatusOK, views.PriceNote(s.pricePreview(userOf(c), composerForm(c))))
}

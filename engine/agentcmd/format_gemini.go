package agentcmd

import (
	"encoding/json"
	"strings"
)

// geminiOutput is `gemini --output-format json`'s object.
type geminiOutput struct {
	SessionID string  `json:"session_id"`
	Response  *string `json:"response"`
	Stats     *struct {
		Models map[string]struct {
			API struct {
				TotalRequests int `json:"totalRequests"`
			} `json:"api"`
			Tokens struct {
				Prompt     int64 `json:"prompt"`
				Candidates int64 `json:"candidates"`
				Cached     int64 `json:"cached"`
				Thoughts   int64 `json:"thoughts"`
				Tool       int64 `json:"tool"`
				Total      int64 `json:"total"`
			} `json:"tokens"`
		} `json:"models"`
	} `json:"stats"`
	Error *struct {
		Type    string          `json:"type"`
		Message string          `json:"message"`
		Code    json.RawMessage `json:"code"`
	} `json:"error"`
}

// parseGemini reads the last object with a response, stats or error. Every
// model of the session is attributed its own tokens: prompt tokens (the
// cached ones included) plus tool-use prompt tokens are input; candidates
// plus thoughts are output, thoughts being reasoning.
func parseGemini(p *ParsedOutput, objs []json.RawMessage) {
	var out *geminiOutput
	for _, raw := range objs {
		var g geminiOutput
		if json.Unmarshal(raw, &g) != nil || (g.Response == nil && g.Stats == nil && g.Error == nil) {
			continue
		}
		out = &g
	}
	if out == nil {
		return
	}
	p.OK = true
	p.SessionID = out.SessionID
	if out.Response != nil {
		p.FinalText = *out.Response
	}
	if out.Error != nil {
		msg := strings.TrimSpace(out.Error.Message)
		if out.Error.Type != "" {
			msg = out.Error.Type + ": " + msg
		}
		p.Error = truncate(orStr(msg, "the agent reported an error"), 1000)
	}
	if out.Stats == nil || out.Stats.Models == nil {
		return
	}
	m := map[string]*AgentUsage{}
	for name, s := range out.Stats.Models {
		t := s.Tokens
		m[name] = &AgentUsage{InputTokens: t.Prompt + t.Tool, CacheReadTokens: min(t.Cached, t.Prompt),
			OutputTokens: t.Candidates + t.Thoughts, ReasoningTokens: t.Thoughts, Requests: s.API.TotalRequests}
	}
	p.ByModel, p.Usage = byModel(m)
	p.Model = mainModel(p.ByModel)
	for _, u := range p.ByModel {
		p.Turns += u.Requests
	}
	if p.Usage == nil {
		p.Usage = &AgentUsage{} // stats with no model: no tokens were used
	}
}

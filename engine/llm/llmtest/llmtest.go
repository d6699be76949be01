// Package llmtest is a scripted OpenAI-compatible chat-completions endpoint
// for tests: an httptest server that answers each request with the next
// scripted reply (tool calls, text, usage, HTTP errors with headers, raw
// bodies), or with a route function's reply, and records what it was sent.
package llmtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sashabaranov/go-openai"
)

// Call is a scripted tool call.
type Call struct {
	ID   string
	Name string
	Args string // raw JSON arguments, sent as is (may be invalid on purpose)
}

// ToolCall returns a Call of name with args marshalled to JSON; a string
// args is sent as is.
func ToolCall(name string, args any) Call {
	if s, ok := args.(string); ok {
		return Call{Name: name, Args: s}
	}
	b, err := json.Marshal(args)
	if err != nil {
		panic(err)
	}
	return Call{Name: name, Args: string(b)}
}

// Reply is one scripted response.
type Reply struct {
	// Status is the HTTP status; 200 when zero. A non-2xx status sends an
	// OpenAI error body with Content as its message unless Body is set.
	Status int
	// Header is added to the response (such as Retry-After).
	Header map[string]string
	// Body, when set, is sent verbatim instead of a generated body.
	Body string

	Content      string
	ToolCalls    []Call
	FinishReason string // "tool_calls" or "stop" by default
	// PromptTokens and CompletionTokens are the usage; 100 and 20 when both
	// are zero and NoUsage is false.
	PromptTokens, CompletionTokens int
	// CachedTokens and ReasoningTokens are sent as the usage's
	// prompt_tokens_details.cached_tokens and
	// completion_tokens_details.reasoning_tokens when set.
	CachedTokens, ReasoningTokens int
	NoUsage                       bool
	Model                         string // the response's model; the request's when empty
	NoChoices                     bool   // send "choices": []
	// Delay holds the response back, or Wait blocks until it is closed.
	Delay time.Duration
	Wait  <-chan struct{}
}

// Text returns a reply with assistant text and no tool calls.
func Text(s string) Reply { return Reply{Content: s} }

// Tools returns a reply that calls tools.
func Tools(calls ...Call) Reply { return Reply{ToolCalls: calls} }

// Error returns an HTTP error reply.
func Error(status int, msg string) Reply { return Reply{Status: status, Content: msg} }

// wireRequest is a request body as the server decodes it: its tools'
// parameters, JSON schemas, are kept as the client sent them
// (json.RawMessage) rather than decoded into maps, which cost more than
// the rest of the request together and which the tests only marshal back.
type wireRequest struct {
	openai.ChatCompletionRequest
	Tools []struct {
		Type     openai.ToolType `json:"type"`
		Function *struct {
			Name        string          `json:"name"`
			Description string          `json:"description,omitempty"`
			Strict      bool            `json:"strict,omitempty"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function,omitempty"`
	} `json:"tools,omitempty"`
}

// Request is a request the server received. Its tools' parameters
// (Tools[i].Function.Parameters) are the JSON schemas as sent, a
// json.RawMessage (see wireRequest).
type Request struct {
	openai.ChatCompletionRequest
	Header http.Header
	At     time.Time
}

// System returns the request's system message.
func (r Request) System() string {
	for _, m := range r.Messages {
		if m.Role == openai.ChatMessageRoleSystem {
			return m.Content
		}
	}
	return ""
}

// Last returns the content of the request's last message.
func (r Request) Last() string {
	if len(r.Messages) == 0 {
		return ""
	}
	return r.Messages[len(r.Messages)-1].Content
}

// HasTool reports whether the request offered the tool.
func (r Request) HasTool(name string) bool {
	for _, t := range r.Tools {
		if t.Function != nil && t.Function.Name == name {
			return true
		}
	}
	return false
}

// Server is a scripted endpoint. Its methods are safe for concurrent use.
type Server struct {
	// URL is the base URL to configure, ending in /v1.
	URL string

	t        testing.TB
	mu       sync.Mutex
	script   []Reply
	routes   []func(Request) (Reply, bool)
	requests []Request
	inFlight int
	maxIn    int
	extra    int
	seq      int
}

// New starts a server answering with script in order. It is closed when the
// test ends, and the test fails if a request arrived with nothing scripted.
func New(t testing.TB, script ...Reply) *Server {
	t.Helper()
	s := &Server{t: t, script: script}
	hs := httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = hs.URL + "/v1"
	t.Cleanup(func() {
		hs.Close()
		if n := s.Unscripted(); n > 0 {
			t.Errorf("llmtest: %d request(s) arrived with no scripted reply", n)
		}
	})
	return s
}

// Push appends replies to the script.
func (s *Server) Push(r ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = append(s.script, r...)
}

// Route adds a function consulted before the script; the first route that
// returns true answers the request. Routes may block (to hold requests in
// flight together).
func (s *Server) Route(fn func(Request) (Reply, bool)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.routes = append(s.routes, fn)
}

// Requests returns the requests received so far, in arrival order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// MaxConcurrent returns the largest number of requests in flight at once.
func (s *Server) MaxConcurrent() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxIn
}

// Remaining returns how many scripted replies are unused.
func (s *Server) Remaining() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.script)
}

// Unscripted returns how many requests found no reply.
func (s *Server) Unscripted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.extra
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		http.Error(w, `{"error":{"message":"llmtest: not found","type":"invalid_request_error"}}`, http.StatusNotFound)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var wire wireRequest
	if err := json.Unmarshal(body, &wire); err != nil {
		http.Error(w, `{"error":{"message":"llmtest: bad request body","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	req := Request{ChatCompletionRequest: wire.ChatCompletionRequest} // its Tools are nil: wireRequest's shadow them
	for _, t := range wire.Tools {
		tool := openai.Tool{Type: t.Type}
		if f := t.Function; f != nil {
			tool.Function = &openai.FunctionDefinition{Name: f.Name, Description: f.Description, Strict: f.Strict, Parameters: f.Parameters}
		}
		req.Tools = append(req.Tools, tool)
	}
	req.Header, req.At = r.Header.Clone(), time.Now()

	s.mu.Lock()
	s.requests = append(s.requests, req)
	s.inFlight++
	s.maxIn = max(s.maxIn, s.inFlight)
	routes := append([]func(Request) (Reply, bool){}, s.routes...)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}()

	var reply Reply
	found := false
	for _, fn := range routes {
		if reply, found = fn(req); found {
			break
		}
	}
	if !found {
		s.mu.Lock()
		if len(s.script) > 0 {
			reply, s.script, found = s.script[0], s.script[1:], true
		} else {
			s.extra++
		}
		s.mu.Unlock()
	}
	if !found {
		reply = Error(http.StatusInternalServerError, "llmtest: script exhausted")
	}
	if reply.Delay > 0 {
		select {
		case <-time.After(reply.Delay):
		case <-r.Context().Done():
			return
		}
	}
	if reply.Wait != nil {
		select {
		case <-reply.Wait:
		case <-r.Context().Done():
			return
		}
	}
	s.write(w, req, reply)
}

func (s *Server) write(w http.ResponseWriter, req Request, reply Reply) {
	for k, v := range reply.Header {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", "application/json")
	status := reply.Status
	if status == 0 {
		status = http.StatusOK
	}
	if reply.Body != "" {
		w.WriteHeader(status)
		io.WriteString(w, reply.Body)
		return
	}
	if status >= 300 {
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
			"message": reply.Content, "type": "llmtest_error", "code": status}})
		return
	}
	s.mu.Lock()
	s.seq++
	seq := s.seq
	s.mu.Unlock()
	msg := map[string]any{"role": "assistant", "content": reply.Content}
	finish := reply.FinishReason
	if len(reply.ToolCalls) > 0 {
		var tcs []map[string]any
		for i, c := range reply.ToolCalls {
			id := c.ID
			if id == "" {
				id = fmt.Sprintf("call_%d_%d", seq, i)
			}
			tcs = append(tcs, map[string]any{"id": id, "type": "function",
				"function": map[string]any{"name": c.Name, "arguments": c.Args}})
		}
		msg["tool_calls"] = tcs
		if finish == "" {
			finish = "tool_calls"
		}
	}
	if finish == "" {
		finish = "stop"
	}
	model := reply.Model
	if model == "" {
		model = req.Model
	}
	resp := map[string]any{"id": fmt.Sprintf("chatcmpl-%d", seq), "object": "chat.completion", "created": time.Now().Unix(),
		"model": model, "choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}}}
	if reply.NoChoices {
		resp["choices"] = []any{}
	}
	if !reply.NoUsage {
		p, c := reply.PromptTokens, reply.CompletionTokens
		if p == 0 && c == 0 {
			p, c = 100, 20
		}
		usage := map[string]any{"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}
		if reply.CachedTokens > 0 {
			usage["prompt_tokens_details"] = map[string]any{"cached_tokens": reply.CachedTokens}
		}
		if reply.ReasoningTokens > 0 {
			usage["completion_tokens_details"] = map[string]any{"reasoning_tokens": reply.ReasoningTokens}
		}
		resp["usage"] = usage
	}
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(resp)
}

package llm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sashabaranov/go-openai"

	"homework/engine/spec"
)

// headerCapture wraps the HTTP client to keep the rate-limit headers of a
// response, which go-openai drops from its error values. The slot to fill
// travels in the request's context, so one client serves every call.
type headerCapture struct{ next openai.HTTPDoer }

type retrySlotKey struct{}

type retrySlot struct {
	retryAfter   string
	retryAfterMS string
}

func (h headerCapture) Do(req *http.Request) (*http.Response, error) {
	resp, err := h.next.Do(req)
	if resp != nil {
		if s, ok := req.Context().Value(retrySlotKey{}).(*retrySlot); ok {
			s.retryAfter = resp.Header.Get("Retry-After")
			s.retryAfterMS = resp.Header.Get("Retry-After-Ms")
		}
	}
	return resp, err
}

// retryDelay returns the delay the server asked for, or 0.
func (s *retrySlot) retryDelay(now time.Time) time.Duration {
	if v := strings.TrimSpace(s.retryAfterMS); v != "" {
		if n, err := strconv.ParseFloat(v, 64); err == nil && n > 0 {
			return time.Duration(n * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(s.retryAfter)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseFloat(v, 64); err == nil {
		if n <= 0 {
			return 0
		}
		return time.Duration(n * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// ModelError is a failed model call after retries.
type ModelError struct {
	Status      int           // HTTP status, 0 for network and response errors
	Retryable   bool          // whether the failure class is retried
	Fatal       bool          // the endpoint refused the credentials (401, 403)
	Message     string        // for people
	Fingerprint string        // stable across occurrences, for the breaker
	RetryAfter  time.Duration // the endpoint's Retry-After on the last attempt, if any
	Err         error
}

func (e *ModelError) Error() string { return e.Message }
func (e *ModelError) Unwrap() error { return e.Err }

var errNoChoices = errors.New("the model endpoint returned a response with no choices")

// classify turns a go-openai error into a ModelError.
func classify(err error) *ModelError {
	var me *ModelError
	if errors.As(err, &me) {
		return me
	}
	var apiErr *openai.APIError
	var reqErr *openai.RequestError
	status, detail := 0, ""
	switch {
	case errors.As(err, &apiErr):
		status, detail = apiErr.HTTPStatusCode, apiErr.Message
	case errors.As(err, &reqErr):
		status, detail = reqErr.HTTPStatusCode, strings.TrimSpace(string(reqErr.Body))
		if detail == "" && reqErr.Err != nil {
			detail = reqErr.Err.Error()
		}
	}
	detail = truncate(oneLine(detail), 300)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return &ModelError{Message: "the model call did not finish before the iteration's deadline", Fingerprint: "model:timeout", Err: err}
	case errors.Is(err, context.Canceled):
		return &ModelError{Message: "the model call was canceled", Fingerprint: "model:canceled", Err: err}
	case errors.Is(err, errNoChoices):
		return &ModelError{Retryable: true, Message: errNoChoices.Error(), Fingerprint: "model:no_choices", Err: err}
	case status == http.StatusUnauthorized:
		return &ModelError{Status: status, Fatal: true, Fingerprint: "model:http_401", Err: err,
			Message: "The model endpoint refused the API key (401) — check HOMEWORK_LLM_API_KEY"}
	case status == http.StatusForbidden:
		return &ModelError{Status: status, Fatal: true, Fingerprint: "model:http_403", Err: err,
			Message: "The model endpoint refused the request (403 forbidden) — check HOMEWORK_LLM_API_KEY and the key's access to the model"}
	case status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || status == 425 || status >= 500:
		return &ModelError{Status: status, Retryable: true, Fingerprint: fmt.Sprintf("model:http_%d", status), Err: err,
			Message: fmt.Sprintf("the model endpoint returned %d: %s", status, detail)}
	case status == http.StatusNotFound:
		return &ModelError{Status: status, Fingerprint: "model:http_404", Err: err,
			Message: fmt.Sprintf("the model endpoint returned 404 (unknown model or wrong base URL): %s", detail)}
	case status >= 400:
		return &ModelError{Status: status, Fingerprint: fmt.Sprintf("model:http_%d", status), Err: err,
			Message: fmt.Sprintf("the model endpoint rejected the request (%d): %s", status, detail)}
	case status > 0:
		return &ModelError{Status: status, Retryable: true, Fingerprint: fmt.Sprintf("model:http_%d", status), Err: err,
			Message: fmt.Sprintf("the model endpoint returned an unexpected status %d", status)}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &ModelError{Retryable: true, Fingerprint: "model:truncated_response", Err: err,
			Message: "the model endpoint's response was cut off"}
	case isNetwork(err):
		return &ModelError{Retryable: true, Fingerprint: "model:network", Err: err,
			Message: "could not reach the model endpoint: " + truncate(oneLine(err.Error()), 200)}
	default:
		// A 200 whose body is not a chat completion (truncated or malformed).
		return &ModelError{Retryable: true, Fingerprint: "model:malformed_response", Err: err,
			Message: "the model endpoint returned a malformed response: " + truncate(oneLine(err.Error()), 200)}
	}
}

func isNetwork(err error) bool {
	var ne net.Error
	var oe *net.OpError
	return errors.As(err, &ne) || errors.As(err, &oe) || errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED)
}

// usage accumulates the tokens and cost of a set of calls.
type usage struct {
	mu               sync.Mutex
	calls            int
	promptTokens     int64
	completionTokens int64
	costUSD          float64
	unpriced         int
}

func (u *usage) add(c spec.LLMCall) {
	if u == nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.calls++
	u.promptTokens += c.PromptTokens
	u.completionTokens += c.CompletionTokens
	u.costUSD += c.CostUSD
	if !c.Priced {
		u.unpriced++
	}
}

// recorder records a model call; reply is the response of a call that
// succeeded (it has a choice), nil for a failed one.
type recorder func(ctx context.Context, c spec.LLMCall, reply *openai.ChatCompletionResponse) error

// recordWith is the recorder that records through rec alone.
func recordWith(rec func(context.Context, spec.LLMCall) error) recorder {
	return func(ctx context.Context, c spec.LLMCall, _ *openai.ChatCompletionResponse) error { return rec(ctx, c) }
}

// chat makes one chat completion with retries. Every attempt, failed or not,
// is recorded through rec with its role, usage, cost and latency, and added
// to u. The returned response has at least one choice.
func (e *Executor) chat(ctx context.Context, rec recorder, u *usage,
	role, model string, req openai.ChatCompletionRequest) (openai.ChatCompletionResponse, error) {
	req.Model = model
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil && attempt == 0 {
			// The iteration's deadline has passed (or it was canceled): no
			// call is made, so none is recorded.
			return openai.ChatCompletionResponse{}, &ModelError{Fingerprint: "model:not_called", Err: err,
				Message: "no model call was made: the iteration's deadline had passed or it was canceled"}
		}
		slot := &retrySlot{}
		start := time.Now()
		resp, err := e.client.CreateChatCompletion(context.WithValue(ctx, retrySlotKey{}, slot), req)
		latency := time.Since(start).Milliseconds()
		if err == nil && len(resp.Choices) == 0 {
			err = errNoChoices
		}
		call := spec.LLMCall{Role: role, Model: model, PromptTokens: int64(resp.Usage.PromptTokens),
			CompletionTokens: int64(resp.Usage.CompletionTokens), LatencyMS: latency}
		if d := resp.Usage.PromptTokensDetails; d != nil {
			call.CachedTokens = int64(d.CachedTokens)
		}
		if d := resp.Usage.CompletionTokensDetails; d != nil {
			call.ReasoningTokens = int64(d.ReasoningTokens)
		}
		call.CostUSD, call.Priced = e.opts.Prices.Cost(model, callUsage(call))
		if !call.Priced && resp.Model != "" {
			call.CostUSD, call.Priced = e.opts.Prices.Cost(resp.Model, callUsage(call))
		}
		if call.Priced {
			call.CostSource = spec.CostSourceTable
		}
		var me *ModelError
		if err != nil {
			me = classify(err)
			if ctx.Err() != nil && me.Status == 0 {
				// The call ended with the iteration's deadline or cancel,
				// whatever the transport's error says (it carries the
				// context's cause).
				me = classify(ctx.Err())
				me.Err = err
			}
			call.Error = me.Message
		}
		u.add(call)
		if rec != nil {
			// The usage must be recorded even when the iteration's context
			// just ended: it was paid for.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			var reply *openai.ChatCompletionResponse
			if me == nil {
				reply = &resp
			}
			if rerr := rec(rctx, call, reply); rerr != nil {
				e.log.Warn("record llm call", "role", role, "model", model, "err", rerr)
			}
			cancel()
		}
		if me == nil {
			return resp, nil
		}
		if d := slot.retryDelay(e.opts.Now()); d > 0 {
			m := *me
			m.RetryAfter = d
			me = &m
		}
		if !me.Retryable || attempt >= e.opts.RetryMax || ctx.Err() != nil {
			return resp, me
		}
		delay := e.opts.RetryBaseDelay << attempt
		if d := slot.retryDelay(e.opts.Now()); d > 0 {
			delay = d
		}
		delay = min(delay, e.opts.MaxRetryDelay)
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < delay {
			// Waiting would outlive the iteration: fail now with the cause.
			return resp, me
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return resp, me
		case <-t.C:
		}
	}
}

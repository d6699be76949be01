package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"homework/engine/proc"
)

// implementation is how the client introduces itself to servers.
var implementation = &sdk.Implementation{Name: "homework", Version: "1"}

// startTimeout bounds a server's handshake and tool listing, so a server
// that never answers fails its start instead of the whole iteration.
const startTimeout = 30 * time.Second

// baseEnv lists the server environment variables a stdio server gets
// besides its own env: enough to find and run programs, nothing secret.
var baseEnv = []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LC_ALL", "TMPDIR", "TZ"}

// Tool is a tool a session's server offers.
type Tool struct {
	Name        string
	Description string
	// InputSchema is the JSON schema of the arguments, as the server sent it.
	InputSchema json.RawMessage
	// ReadOnly is the server's readOnlyHint: the tool does not change its
	// environment.
	ReadOnly bool
}

// Session is a connection to one server for one iteration. Its methods are
// safe for concurrent use.
type Session struct {
	server *Server
	cs     *sdk.ClientSession
	tools  []Tool

	// Stdio servers only.
	proc     *proc.Process
	stdin    *os.File
	stdout   *os.File
	exited   chan struct{} // closed when the process has exited and was reaped
	stop     context.CancelFunc
	stderr   *tail
	readDone chan struct{} // closed when stderr is read to its end

	closeOnce sync.Once
}

// Open starts (stdio) or connects to (HTTP) server s, initializes the
// session and lists its tools. A stdio server is started under the leash
// ctx carries (proc.WithLeash) and is killed when ctx ends; close the
// session when done with it. The error of a server that could not start
// names it and has its last stderr line.
func Open(ctx context.Context, c *Config, s *Server) (*Session, error) {
	var sess *Session
	var err error
	switch s.Type {
	case TypeStdio:
		sess, err = openStdio(ctx, s)
	default:
		sess, err = openHTTP(ctx, s)
	}
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if err := sess.listTools(lctx); err != nil {
		sess.Close()
		return nil, sess.failure("listing its tools failed", err)
	}
	names := make([]string, len(sess.tools))
	for i, t := range sess.tools {
		names[i] = t.Name
	}
	c.noteTools(s.Name, names, time.Now())
	return sess, nil
}

func openStdio(ctx context.Context, s *Server) (*Session, error) {
	path, err := exec.LookPath(s.Command)
	if err != nil {
		return nil, &StartError{Server: s.Name, Detail: fmt.Sprintf("the command %q was not found: %v", s.Command, err)}
	}
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("mcp: stdin pipe: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		stdinW.Close()
		return nil, fmt.Errorf("mcp: stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		stdinW.Close()
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("mcp: stderr pipe: %w", err)
	}
	cmd := exec.Command(path, s.Args...)
	cmd.Args[0] = s.Command
	cmd.Dir = s.Cwd
	cmd.Env = serverEnv(s.Env)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdinR, outW, errW
	// Under the attempt's leash (ctx): the server ends with the server
	// process and with the attempt's hold on the run.
	p, err := proc.Start(ctx, cmd)
	// The child has its own copies (or never started).
	stdinR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		stdinW.Close()
		outR.Close()
		errR.Close()
		if errors.Is(err, proc.ErrLeashClosed) {
			return nil, err
		}
		return nil, &StartError{Server: s.Name, Detail: err.Error()}
	}
	pctx, stop := context.WithCancel(ctx)
	sess := &Session{server: s, proc: p, stdin: stdinW, stdout: outR, exited: make(chan struct{}), stop: stop,
		stderr: &tail{}, readDone: make(chan struct{})}
	go func() {
		// Exits when the process has exited, or was killed because ctx
		// ended or Close stopped it.
		defer close(sess.exited)
		p.Wait(pctx, 0, time.Second)
	}()
	go func() {
		// Exits at EOF: when the process and everything that holds its
		// stderr have exited.
		defer close(sess.readDone)
		sess.stderr.read(errR)
		errR.Close()
	}()
	client := sdk.NewClient(implementation, nil)
	// The transport ignores the context; it bounds the handshake only.
	cctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	cs, err := client.Connect(cctx, &sdk.IOTransport{Reader: outR, Writer: stdinW}, nil)
	if err != nil {
		sess.Close()
		return nil, sess.failure("it did not start", err)
	}
	sess.cs = cs
	return sess, nil
}

// serverEnv is a stdio server's environment: baseEnv from the server
// process's, then the configured env.
func serverEnv(env map[string]string) []string {
	var out []string
	for _, k := range baseEnv {
		if v, ok := os.LookupEnv(k); ok {
			out = append(out, k+"="+v)
		}
	}
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

func openHTTP(ctx context.Context, s *Server) (*Session, error) {
	hc := &http.Client{Transport: headerTransport{headers: s.Headers, next: http.DefaultTransport}}
	var t sdk.Transport = &sdk.StreamableClientTransport{Endpoint: s.URL, HTTPClient: hc, MaxRetries: 1}
	if s.Type == TypeSSE {
		t = &sdk.SSEClientTransport{Endpoint: s.URL, HTTPClient: hc}
	}
	client := sdk.NewClient(implementation, nil)
	cs, err := client.Connect(ctx, t, nil)
	if err != nil {
		return nil, &StartError{Server: s.Name, Detail: "connecting to " + s.URL + " failed: " + oneLine(err.Error())}
	}
	return &Session{server: s, cs: cs}, nil
}

// headerTransport adds the configured headers to every request.
type headerTransport struct {
	headers map[string]string
	next    http.RoundTripper
}

func (t headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if len(t.headers) > 0 {
		req = req.Clone(req.Context())
		for k, v := range t.headers {
			req.Header.Set(k, v)
		}
	}
	return t.next.RoundTrip(req)
}

func (s *Session) listTools(ctx context.Context) error {
	for t, err := range s.cs.Tools(ctx, nil) {
		if err != nil {
			return err
		}
		schema, err := json.Marshal(t.InputSchema)
		if err != nil || string(schema) == "null" {
			schema = []byte(`{"type":"object"}`)
		}
		s.tools = append(s.tools, Tool{Name: t.Name, Description: t.Description, InputSchema: schema,
			ReadOnly: t.Annotations != nil && t.Annotations.ReadOnlyHint})
	}
	return nil
}

// Server returns the session's server.
func (s *Session) Server() *Server { return s.server }

// Tools returns the tools the server offered when the session opened.
func (s *Session) Tools() []Tool { return s.tools }

// Result is a tool call's outcome as the model sees it.
type Result struct {
	Text    string
	IsError bool // the tool reported an error the model can react to
}

// Call calls the tool name with args (a JSON object), bounded by the
// server's tool timeout inside ctx. It returns a *CallError when the call
// did not complete: the server crashed or closed the connection
// (Crashed), the tool timed out, or the server answered with a protocol
// error. The end of ctx is returned as ctx's error.
func (s *Session) Call(ctx context.Context, name string, args json.RawMessage) (*Result, error) {
	cctx, cancel := context.WithTimeout(ctx, s.server.ToolTimeout)
	defer cancel()
	var a any = map[string]any{}
	if len(args) > 0 {
		a = args
	}
	res, err := s.cs.CallTool(cctx, &sdk.CallToolParams{Name: name, Arguments: a})
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case cctx.Err() != nil:
			return nil, &CallError{Server: s.server.Name, Detail: fmt.Sprintf("the call timed out after %s", s.server.ToolTimeout)}
		case s.Dead():
			return nil, &CallError{Server: s.server.Name, Crashed: true, Detail: s.deathDetail()}
		case errors.Is(err, sdk.ErrConnectionClosed):
			return nil, &CallError{Server: s.server.Name, Crashed: true, Detail: "the connection closed: " + oneLine(err.Error())}
		}
		return nil, &CallError{Server: s.server.Name, Detail: oneLine(err.Error())}
	}
	return &Result{Text: FormatResult(res), IsError: res.IsError}, nil
}

// Dead reports whether a stdio server's process has exited.
func (s *Session) Dead() bool {
	if s.exited == nil {
		return false
	}
	select {
	case <-s.exited:
		return true
	default:
	}
	// A crash closes stdout before the supervisor has reaped it.
	select {
	case <-s.exited:
		return true
	case <-time.After(200 * time.Millisecond):
		return false
	}
}

// deathDetail says how a stdio server ended, with its last stderr line.
func (s *Session) deathDetail() string {
	<-s.exited
	msg := "the server exited"
	if st := s.proc.Cmd.ProcessState; st != nil {
		msg += " (" + st.String() + ")"
	}
	return msg + s.lastStderr()
}

// lastStderr is ": last stderr line: …", or "" when it wrote none.
func (s *Session) lastStderr() string {
	if s.stderr == nil {
		return ""
	}
	if s.readDone != nil {
		// The line that explains an exit is written just before it.
		select {
		case <-s.readDone:
		case <-time.After(500 * time.Millisecond):
		}
	}
	if l := s.stderr.last(); l != "" {
		return "; its last stderr line: " + l
	}
	return ""
}

// failure is the StartError of a session that opened but failed at once.
func (s *Session) failure(what string, err error) error {
	detail := what + ": " + oneLine(err.Error())
	if s.exited != nil && s.Dead() {
		detail = what + ": " + s.deathDetail()
	}
	return &StartError{Server: s.server.Name, Detail: detail}
}

// Close ends the session: an HTTP session is ended on the server; a stdio
// server's stdin is closed and it is given a moment to exit before it is
// killed. Close waits until the process is gone.
func (s *Session) Close() error {
	var err error
	s.closeOnce.Do(func() {
		if s.cs != nil {
			err = s.cs.Close()
		}
		if s.proc == nil {
			return
		}
		s.stdin.Close()
		s.stdout.Close()
		select {
		case <-s.exited:
		case <-time.After(2 * time.Second):
		}
		s.stop() // SIGTERM, then SIGKILL a second later
		<-s.exited
		select {
		case <-s.readDone:
		case <-time.After(2 * time.Second):
			// A grandchild that left the group holds stderr; stop reading.
		}
	})
	return err
}

// StartError says a server could not be started or connected to.
type StartError struct {
	Server string
	Detail string
}

func (e *StartError) Error() string {
	return fmt.Sprintf("MCP server %s: %s", e.Server, e.Detail)
}

// CallError says a tool call did not complete.
type CallError struct {
	Server  string
	Crashed bool // the server's process exited or its connection closed
	Detail  string
}

func (e *CallError) Error() string {
	return fmt.Sprintf("MCP server %s: %s", e.Server, e.Detail)
}

// tail keeps the last lines a server wrote to stderr.
type tail struct {
	mu    sync.Mutex
	lines []string
}

func (t *tail) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		t.mu.Lock()
		t.lines = append(t.lines, truncate(line, 500))
		if len(t.lines) > 20 {
			t.lines = t.lines[1:]
		}
		t.mu.Unlock()
	}
	// A line longer than the buffer ends the scan: drain the rest so the
	// server never blocks on a full stderr pipe.
	io.Copy(io.Discard, r)
}

func (t *tail) last() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == 0 {
		return ""
	}
	return t.lines[len(t.lines)-1]
}

func oneLine(s string) string {
	return truncate(strings.Join(strings.Fields(s), " "), 500)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

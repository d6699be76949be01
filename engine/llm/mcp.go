package llm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"homework/engine/mcp"
	"homework/engine/spec"
)

// maxToolName is the longest function name OpenAI-compatible endpoints
// accept (^[a-zA-Z0-9_-]{1,64}$).
const maxToolName = 64

// maxMCPResult is the part of an MCP tool's result the model sees; the
// rest is dropped with its size said.
const maxMCPResult = maxObservation - 200

// validateMCPServers refuses names the server has not configured
// (field mcp_servers[i]), duplicates, and admin_only servers for others.
func (e *Executor) validateMCPServers(user *spec.User, cfg *spec.Config) error {
	seen := map[string]bool{}
	for i, name := range cfg.MCPServers {
		field := fmt.Sprintf("mcp_servers[%d]", i)
		s, ok := e.opts.MCP.Lookup(name)
		switch {
		case !ok && e.opts.MCP == nil:
			return spec.FieldError(field, "This server has no MCP servers configured (start it with --mcp-config FILE); leave out mcp_servers.")
		case !ok:
			return spec.FieldError(field, "There is no MCP server %q on this server; the configured ones are listed at GET /api/mcp/servers.", name)
		case seen[name]:
			return spec.FieldError(field, "The MCP server %q is named twice.", name)
		case s.AdminOnly && (user == nil || !user.IsAdmin):
			return &spec.Error{Code: spec.EFORBIDDEN, Field: field, Message: fmt.Sprintf("Only admins may use the MCP server %q.", name)}
		}
		seen[name] = true
	}
	return nil
}

// mcpSet is the MCP sessions of one iteration and the tools they offer.
// Calls from parallel branches may use it at once.
type mcpSet struct {
	it  *iteration
	ctx context.Context // the iteration's: restarted servers live as long
	cfg *mcp.Config

	mu    sync.Mutex
	conns map[string]*mcpConn // by server name
	tools []*tool             // in the order offered
}

// mcpConn is one server's session in the iteration.
type mcpConn struct {
	server    *mcp.Server
	sess      *mcp.Session // nil once given up
	restarted bool
	failure   string // why the server was given up
}

// openMCP opens a session with each of the run's MCP servers, retrying a
// server that fails to start once. The error names the server that could
// not be started and its last stderr line; the sessions opened before it
// are closed. Tools that change things are left out of read_only runs and
// of the plan phase, where the model may only write notes.
func (it *iteration) openMCP(ctx context.Context) (*mcpSet, error) {
	set := &mcpSet{it: it, ctx: ctx, cfg: it.e.opts.MCP, conns: map[string]*mcpConn{}}
	if len(it.cfg.MCPServers) == 0 {
		return set, nil
	}
	taken := map[string]bool{}
	for _, t := range it.e.tools {
		taken[t.name] = true
	}
	var mapping []string
	for _, name := range it.cfg.MCPServers {
		s, ok := set.cfg.Lookup(name)
		if !ok {
			set.close()
			return nil, &mcp.StartError{Server: name, Detail: "it is no longer configured on this server"}
		}
		sess, err := set.open(s)
		if err != nil {
			set.close()
			return nil, err
		}
		set.conns[name] = &mcpConn{server: s, sess: sess}
		for _, mt := range sess.Tools() {
			if (it.readOnly || it.planPhase) && !mt.ReadOnly {
				continue
			}
			t := set.newTool(s, mt, taken)
			set.tools = append(set.tools, t)
			mapping = append(mapping, fmt.Sprintf("%s = tool %q of MCP server %s", t.name, mt.Name, s.Name))
		}
	}
	spec.Transcribe(ctx, it.host, spec.TranscriptEntry{Kind: spec.TranscriptNote, Name: "mcp",
		Text: fmt.Sprintf("MCP servers %s offer %d tools:\n%s", strings.Join(it.cfg.MCPServers, ", "), len(set.tools), strings.Join(mapping, "\n"))})
	return set, nil
}

// open opens a session with s, trying twice.
func (set *mcpSet) open(s *mcp.Server) (*mcp.Session, error) {
	sess, err := mcp.Open(set.ctx, set.cfg, s)
	var se *mcp.StartError
	if errors.As(err, &se) && set.ctx.Err() == nil {
		set.it.e.log.Warn("mcp server failed to start; retrying once", "run", set.it.in.RunID, "server", s.Name, "err", err)
		sess, err = mcp.Open(set.ctx, set.cfg, s)
	}
	return sess, err
}

// close ends every session; stdio servers are gone when it returns.
func (set *mcpSet) close() {
	if set == nil {
		return
	}
	set.mu.Lock()
	defer set.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range set.conns {
		if c.sess != nil {
			wg.Add(1)
			go func(s *mcp.Session) {
				// Exits once the session is closed and its process gone.
				defer wg.Done()
				s.Close()
			}(c.sess)
		}
	}
	wg.Wait()
}

// newTool returns the tool that offers mt of server s to the model, named
// mcp__{server}__{tool} made fit for the endpoint and unique among taken.
func (set *mcpSet) newTool(s *mcp.Server, mt mcp.Tool, taken map[string]bool) *tool {
	name := toolName("mcp__"+s.Name+"__"+mt.Name, taken)
	taken[name] = true
	desc := strings.TrimSpace(mt.Description)
	if desc == "" {
		desc = mt.Name
	}
	desc = truncate(fmt.Sprintf("[MCP server %s, tool %s] %s", s.Name, mt.Name, desc), 1024)
	schema := string(mt.InputSchema)
	sch, err := compileSchema(name, schema)
	if err != nil {
		// The server's own validation still applies.
		set.it.e.log.Warn("mcp tool schema does not compile; arguments are not checked here", "server", s.Name, "tool", mt.Name, "err", err)
		schema = `{"type":"object"}`
		sch, _ = compileSchema(name, schema)
	}
	server, toolName := s.Name, mt.Name
	return &tool{name: name, desc: desc, schema: schema, sch: sch, params: json.RawMessage(schema),
		run: func(ctx context.Context, sc *scope, args json.RawMessage) (string, error) {
			return set.call(ctx, server, toolName, args)
		}}
}

func compileSchema(name, schema string) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		return nil, err
	}
	if m, ok := doc.(map[string]any); !ok || (m["type"] != nil && m["type"] != "object") {
		return nil, errors.New("the input schema is not an object schema")
	}
	c := jsonschema.NewCompiler()
	loc := "mem:///mcp/" + name + ".json"
	if err := c.AddResource(loc, doc); err != nil {
		return nil, err
	}
	return c.Compile(loc)
}

var badToolRune = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// toolName makes name a valid function name (letters, digits, '_' and '-',
// at most maxToolName) that is not in taken: a long name keeps its start
// and gets a hash of the whole, a taken one a number.
func toolName(name string, taken map[string]bool) string {
	clean := badToolRune.ReplaceAllString(name, "_")
	if len(clean) > maxToolName {
		sum := sha256.Sum256([]byte(name))
		clean = clean[:maxToolName-9] + "_" + hex.EncodeToString(sum[:4])
	}
	out := clean
	for n := 2; taken[out]; n++ {
		suffix := fmt.Sprintf("_%d", n)
		out = clean[:min(len(clean), maxToolName-len(suffix))] + suffix
	}
	return out
}

// call calls tool of server. A server that crashed is restarted once in
// the iteration and the call retried; after that the server is given up:
// the call and later ones return its failure to the model, and the
// iteration's error names the server and its last stderr line.
func (set *mcpSet) call(ctx context.Context, server, tool string, args json.RawMessage) (string, error) {
	set.mu.Lock()
	c := set.conns[server]
	sess, failure := c.sess, c.failure
	set.mu.Unlock()
	if sess == nil {
		return "", toolErrorf("the MCP server %s is unavailable in this iteration: %s", server, failure)
	}
	res, err := sess.Call(ctx, tool, args)
	var ce *mcp.CallError
	if errors.As(err, &ce) && ce.Crashed && ctx.Err() == nil {
		if sess = set.restart(c, sess, err); sess != nil {
			res, err = sess.Call(ctx, tool, args)
			if errors.As(err, &ce) && ce.Crashed && ctx.Err() == nil {
				set.giveUp(c, err)
			}
		}
	}
	switch {
	case errors.As(err, &ce) && ce.Crashed:
		set.it.fail(mcpToolName(server, tool), "unavailable", err.Error())
		return "", toolErrorf("%s. The server is unavailable for the rest of this iteration.", err.Error())
	case errors.As(err, &ce):
		return "", toolErrorf("%s", err.Error())
	case err != nil:
		return "", err
	case res.IsError:
		return "", toolErrorf("%s", cutResult(res.Text))
	}
	return cutResult(res.Text), nil
}

// restart replaces c's crashed session old, once; it returns the new
// session, or nil when c was given up. Another branch may have restarted
// it already.
func (set *mcpSet) restart(c *mcpConn, old *mcp.Session, crash error) *mcp.Session {
	set.mu.Lock()
	defer set.mu.Unlock()
	if c.sess != old {
		return c.sess // restarted (or given up) meanwhile
	}
	old.Close()
	if c.restarted {
		c.sess, c.failure = nil, crash.Error()
		return nil
	}
	c.restarted = true
	set.it.e.log.Warn("mcp server crashed; restarting it once", "run", set.it.in.RunID, "server", c.server.Name, "err", crash)
	sess, err := mcp.Open(set.ctx, set.cfg, c.server)
	if err != nil {
		c.sess, c.failure = nil, err.Error()
		return nil
	}
	c.sess = sess
	return sess
}

// giveUp ends c after its restarted session crashed too.
func (set *mcpSet) giveUp(c *mcpConn, crash error) {
	set.mu.Lock()
	defer set.mu.Unlock()
	if c.sess != nil {
		c.sess.Close()
	}
	c.sess, c.failure = nil, crash.Error()
}

// mcpToolName is the name a tool's failures are recorded under: the
// unsanitized mcp__{server}__{tool}.
func mcpToolName(server, tool string) string { return "mcp__" + server + "__" + tool }

// cutResult keeps the first maxMCPResult bytes of s and says how much was
// dropped.
func cutResult(s string) string {
	if len(s) <= maxMCPResult {
		return s
	}
	kept := truncate(s, maxMCPResult)
	kept = strings.TrimSuffix(kept, "…")
	return fmt.Sprintf("%s\n[… %d more bytes of the result were dropped]", kept, len(s)-len(kept))
}

// withMCP returns tools followed by the MCP tools, unless tools is only
// the loop's finisher.
func (set *mcpSet) withMCP(tools []*tool) []*tool {
	if set == nil || len(set.tools) == 0 {
		return tools
	}
	return append(slices.Clip(tools), set.tools...)
}

// Package mcp is the client side of the Model Context Protocol for LLM runs:
// the operator's server configuration (the common {"mcpServers": {…}} file),
// and sessions with those servers, opened for one iteration and closed at
// its end. Stdio servers are started through engine/proc, so they die with
// the server process and with the attempt that started them. The protocol
// itself is the official SDK's (github.com/modelcontextprotocol/go-sdk).
package mcp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Transports of a configured server.
const (
	TypeStdio = "stdio"
	TypeHTTP  = "http" // streamable HTTP
	TypeSSE   = "sse"  // the older HTTP+SSE transport
)

// DefaultToolTimeout bounds one tool call when the server sets no
// tool_timeout_ms.
const DefaultToolTimeout = 60 * time.Second

// Server is one configured MCP server.
type Server struct {
	Name string
	Type string // TypeStdio, TypeHTTP or TypeSSE

	// Stdio servers.
	Command string
	Args    []string
	Env     map[string]string // added to a minimal environment, ${VAR} expanded
	Cwd     string

	// HTTP servers.
	URL     string
	Headers map[string]string // ${VAR} expanded

	// AdminOnly servers may be chosen by admins only.
	AdminOnly bool
	// ToolTimeout bounds one tool call; DefaultToolTimeout when zero.
	ToolTimeout time.Duration
}

// Config is the operator's set of MCP servers. Its methods are safe for
// concurrent use.
type Config struct {
	servers []*Server // sorted by name

	mu    sync.Mutex
	tools map[string]seenTools // by server name
}

type seenTools struct {
	names []string
	at    time.Time
}

// rawServer is one entry of the file, as written.
type rawServer struct {
	Type          string            `json:"type"`
	Command       string            `json:"command"`
	Args          []string          `json:"args"`
	Env           map[string]string `json:"env"`
	Cwd           string            `json:"cwd"`
	URL           string            `json:"url"`
	Headers       map[string]string `json:"headers"`
	AdminOnly     bool              `json:"admin_only"`
	ToolTimeoutMS int64             `json:"tool_timeout_ms"`
}

// LoadFile reads the configuration at path, expanding ${VAR} and
// ${VAR:-default} in env and headers with getenv (os.Getenv when nil).
// Errors name the path and the field.
func LoadFile(path string, getenv func(string) string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	c, err := Parse(b, getenv)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// serverName is what a server may be called: it becomes part of tool
// names (mcp__{server}__{tool}) and of request fields.
var serverName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// Parse reads a configuration file's content; see LoadFile.
func Parse(b []byte, getenv func(string) string) (*Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	var file struct {
		Servers map[string]json.RawMessage `json:"mcpServers"`
	}
	if err := json.Unmarshal(b, &file); err != nil {
		return nil, fmt.Errorf("not a JSON object with \"mcpServers\": %v", err)
	}
	if file.Servers == nil {
		return nil, fmt.Errorf("mcpServers: missing; the file is {\"mcpServers\": {\"name\": {\"command\": …} or {\"type\": \"http\", \"url\": …}}}")
	}
	c := &Config{tools: map[string]seenTools{}}
	for name, raw := range file.Servers {
		field := "mcpServers." + name
		if !serverName.MatchString(name) {
			return nil, fmt.Errorf("%s: a server name is 1 to 64 letters, digits, '_', '-' or '.', starting with a letter or digit", field)
		}
		if strings.Contains(name, "__") {
			return nil, fmt.Errorf("%s: a server name must not contain \"__\" (tool names are mcp__{server}__{tool})", field)
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		var r rawServer
		if err := dec.Decode(&r); err != nil {
			return nil, fmt.Errorf("%s: %v", field, strings.TrimPrefix(err.Error(), "json: "))
		}
		s, err := r.server(name, field, getenv)
		if err != nil {
			return nil, err
		}
		c.servers = append(c.servers, s)
	}
	sort.Slice(c.servers, func(i, j int) bool { return c.servers[i].Name < c.servers[j].Name })
	return c, nil
}

func (r *rawServer) server(name, field string, getenv func(string) string) (*Server, error) {
	s := &Server{Name: name, Type: r.Type, AdminOnly: r.AdminOnly}
	if s.Type == "" {
		s.Type = TypeStdio
		if r.URL != "" && r.Command == "" {
			s.Type = TypeHTTP
		}
	}
	if s.Type == "streamable-http" || s.Type == "streamableHttp" {
		s.Type = TypeHTTP
	}
	if r.ToolTimeoutMS < 0 {
		return nil, fmt.Errorf("%s.tool_timeout_ms: must not be negative", field)
	}
	s.ToolTimeout = time.Duration(r.ToolTimeoutMS) * time.Millisecond
	if s.ToolTimeout == 0 {
		s.ToolTimeout = DefaultToolTimeout
	}
	var err error
	switch s.Type {
	case TypeStdio:
		if strings.TrimSpace(r.Command) == "" {
			return nil, fmt.Errorf("%s.command: required for a stdio server", field)
		}
		if r.URL != "" || len(r.Headers) > 0 {
			return nil, fmt.Errorf("%s.url: a stdio server has no url or headers (set \"type\": \"http\" for a remote one)", field)
		}
		s.Command, s.Args, s.Cwd = r.Command, r.Args, r.Cwd
		if s.Env, err = expandAll(r.Env, field+".env", getenv); err != nil {
			return nil, err
		}
	case TypeHTTP, TypeSSE:
		if !strings.HasPrefix(r.URL, "http://") && !strings.HasPrefix(r.URL, "https://") {
			return nil, fmt.Errorf("%s.url: must start with http:// or https://, got %q", field, r.URL)
		}
		if r.Command != "" || len(r.Args) > 0 || len(r.Env) > 0 || r.Cwd != "" {
			return nil, fmt.Errorf("%s.command: an %s server has no command, args, env or cwd", field, s.Type)
		}
		s.URL = r.URL
		if s.Headers, err = expandAll(r.Headers, field+".headers", getenv); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("%s.type: must be \"stdio\", \"http\" or \"sse\", got %q", field, r.Type)
	}
	return s, nil
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-[^}]*)?\}`)

// expandAll expands ${VAR} and ${VAR:-default} in m's values. A variable
// that is unset (or empty) without a default is an error naming the field.
func expandAll(m map[string]string, field string, getenv func(string) string) (map[string]string, error) {
	if len(m) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		var missing string
		out[k] = envRef.ReplaceAllStringFunc(v, func(ref string) string {
			sub := envRef.FindStringSubmatch(ref)
			if val := getenv(sub[1]); val != "" {
				return val
			}
			if sub[2] != "" {
				return sub[2][2:]
			}
			if missing == "" {
				missing = sub[1]
			}
			return ""
		})
		if missing != "" {
			return nil, fmt.Errorf("%s.%s: ${%s} is not set in the server's environment (use ${%s:-default} for a default)", field, k, missing, missing)
		}
	}
	return out, nil
}

// Servers returns the configured servers, sorted by name. Nil when c is nil.
func (c *Config) Servers() []*Server {
	if c == nil {
		return nil
	}
	return slices.Clone(c.servers)
}

// Lookup returns the server called name.
func (c *Config) Lookup(name string) (*Server, bool) {
	if c == nil {
		return nil, false
	}
	for _, s := range c.servers {
		if s.Name == name {
			return s, true
		}
	}
	return nil, false
}

// noteTools remembers the tool names a session of server listed, for
// listings that should not start a server to find them out.
func (c *Config) noteTools(server string, names []string, at time.Time) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tools[server] = seenTools{names: slices.Clone(names), at: at}
}

// SeenTools returns the tool names the last session of server listed and
// when, or nil when no session has listed them since the server started.
func (c *Config) SeenTools(server string) ([]string, time.Time) {
	if c == nil {
		return nil, time.Time{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.tools[server]
	return slices.Clone(t.names), t.at
}

package handlers

import (
	"time"

	"github.com/gofiber/fiber/v2"

	"homework/engine/mcp"
	"homework/engine/spec"
)

// MCPServerJSON is one MCP server in GET /api/mcp/servers.
type MCPServerJSON struct {
	Name          string `json:"name"`
	Type          string `json:"type"` // stdio, http or sse
	AdminOnly     bool   `json:"admin_only"`
	ToolTimeoutMS int64  `json:"tool_timeout_ms"`
	// Tools are the tool names the server listed to the last run that used
	// it since this server process started; null before any has. Listing
	// them would start the server, which only runs do.
	Tools       []string   `json:"tools"`
	ToolsSeenAt *time.Time `json:"tools_seen_at,omitempty"`
}

// mcpServersFor returns the MCP servers user may name in mcp_servers: all
// configured ones, admin_only ones for admins only.
func mcpServersFor(c *mcp.Config, user *spec.User) []MCPServerJSON {
	out := []MCPServerJSON{}
	for _, s := range c.Servers() {
		if s.AdminOnly && (user == nil || !user.IsAdmin) {
			continue
		}
		j := MCPServerJSON{Name: s.Name, Type: s.Type, AdminOnly: s.AdminOnly, ToolTimeoutMS: s.ToolTimeout.Milliseconds()}
		if tools, at := c.SeenTools(s.Name); tools != nil {
			j.Tools, j.ToolsSeenAt = tools, &at
		}
		out = append(out, j)
	}
	return out
}

// apiMCPServers handles GET /api/mcp/servers: {"servers": [...]}, the MCP
// servers the caller may use in an LLM run's mcp_servers.
func (s *Server) apiMCPServers(c *fiber.Ctx) error {
	return c.JSON(fiber.Map{"servers": mcpServersFor(s.opts.MCP, userOf(c))})
}

// Package mcptest is a small real MCP server for tests, written with the
// official SDK: over stdio (any test binary that imports this package turns
// into the server when re-executed with Stdio's arguments) and over
// streamable HTTP (an httptest server).
//
// Its tools: echo (returns its text), add (structured output), fail (an
// isError result), crash (the process writes to stderr and exits), sleep
// (waits, for timeouts and cancels), big (a long text), image (an image
// part), pid (the server's process id).
package mcptest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// serveArg is the first argument that makes a test binary the server.
const serveArg = "homework-mcptest-serve"

// CrashAtStart makes the stdio server write StartFailure to stderr and exit
// before it speaks.
const CrashAtStart = "--crash-at-start"

// StartFailure is what a server started with CrashAtStart writes last.
const StartFailure = "mcptest: cannot open the database"

// CrashLine is what the crash tool writes to stderr before exiting.
const CrashLine = "mcptest: panic: crashing on purpose"

// PIDFileEnv names a file the stdio server appends its process id to when
// it starts.
const PIDFileEnv = "MCPTEST_PID_FILE"

func init() {
	if len(os.Args) < 2 || os.Args[1] != serveArg {
		return
	}
	os.Exit(serveStdio(os.Args[2:]))
}

func serveStdio(args []string) int {
	if f := os.Getenv(PIDFileEnv); f != "" {
		if fh, err := os.OpenFile(f, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintf(fh, "%d\n", os.Getpid())
			fh.Close()
		}
	}
	for _, a := range args {
		if a == CrashAtStart {
			fmt.Fprintln(os.Stderr, "mcptest: starting")
			fmt.Fprintln(os.Stderr, StartFailure)
			return 1
		}
	}
	fmt.Fprintln(os.Stderr, "mcptest: serving on stdio")
	if err := NewServer().Run(context.Background(), &sdk.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "mcptest:", err)
		return 1
	}
	return 0
}

// Stdio returns the command and arguments that run the stdio server: this
// test binary, re-executed.
func Stdio(extra ...string) (command string, args []string) {
	exe, err := os.Executable()
	if err != nil {
		panic(err)
	}
	return exe, append([]string{serveArg}, extra...)
}

// HTTP starts the server over streamable HTTP and returns its URL. When
// token is not empty, requests must carry "Authorization: Bearer <token>".
// It is closed when the test ends.
func HTTP(t testing.TB, token string) string {
	t.Helper()
	srv := NewServer()
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token != "" && r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	return hs.URL + "/mcp"
}

// SSE starts the server over the older HTTP+SSE transport and returns its
// URL. It is closed when the test ends.
func SSE(t testing.TB) string {
	t.Helper()
	srv := NewServer()
	hs := httptest.NewServer(sdk.NewSSEHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return hs.URL + "/sse"
}

type echoIn struct {
	Text string `json:"text" jsonschema:"the text to return"`
}

type addIn struct {
	A int `json:"a"`
	B int `json:"b"`
}

type addOut struct {
	Sum int `json:"sum"`
}

type sleepIn struct {
	MS int `json:"ms" jsonschema:"how long to sleep, in milliseconds"`
}

type bigIn struct {
	Bytes int `json:"bytes"`
}

type none struct{}

// NewServer returns the test server with its tools.
func NewServer() *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: "mcptest", Version: "1"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: "echo", Description: "Return the text.", Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *sdk.CallToolRequest, in echoIn) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "echo: " + in.Text}}}, nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "add", Description: "Add two numbers."},
		func(ctx context.Context, req *sdk.CallToolRequest, in addIn) (*sdk.CallToolResult, addOut, error) {
			return nil, addOut{Sum: in.A + in.B}, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "fail", Description: "Always fails."},
		func(ctx context.Context, req *sdk.CallToolRequest, in none) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "the widget is jammed"}}}, nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "crash", Description: "Crash the server."},
		func(ctx context.Context, req *sdk.CallToolRequest, in none) (*sdk.CallToolResult, any, error) {
			fmt.Fprintln(os.Stderr, CrashLine)
			os.Exit(2)
			return nil, nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "sleep", Description: "Sleep."},
		func(ctx context.Context, req *sdk.CallToolRequest, in sleepIn) (*sdk.CallToolResult, any, error) {
			select {
			case <-time.After(time.Duration(in.MS) * time.Millisecond):
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "slept"}}}, nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "big", Description: "Return a long text."},
		func(ctx context.Context, req *sdk.CallToolRequest, in bigIn) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: strings.Repeat("x", in.Bytes)}}}, nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "image", Description: "Return an image."},
		func(ctx context.Context, req *sdk.CallToolRequest, in none) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "a picture:"},
				&sdk.ImageContent{MIMEType: "image/png", Data: []byte("\x89PNG fake")}}}, nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "pid", Description: "Return the server's process id."},
		func(ctx context.Context, req *sdk.CallToolRequest, in none) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: strconv.Itoa(os.Getpid())}}}, nil, nil
		})
	return s
}

// Alive reports whether process pid still runs (a zombie does not).
func Alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// PIDs returns the process ids written to a PIDFileEnv file.
func PIDs(t testing.TB, file string) []int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		t.Fatal(err)
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	return out
}

// Package agentcmd is the command executor: the classic Ralph loop around
// any agent CLI (claude -p, codex exec, aider, a script). Each iteration runs
// the run's argv in its work directory with the prompt on stdin, captures
// and streams the output, kills the whole process group on timeout or
// cancel, detects <promise>COMPLETE</promise> and <promise>BLOCKED</promise>,
// and fingerprints the output and the work directory. After the gate decides,
// AfterGate appends an entry to <workdir>/.homework/progress.txt (atomically,
// bounded) and optionally commits the iteration's changes.
//
// Command runs are off unless the server names a root directory
// (--allow-command-runs ROOT); only admins may create them, and only in work
// directories that resolve under that root.
//
// The agent's environment is not the server's: it gets PATH, HOME, USER,
// LOGNAME, SHELL, LANG, LC_ALL, LC_CTYPE, TZ, TMPDIR and TERM when the server
// has them, the variables the run names in agent.env, and HOMEWORK_RUN_ID,
// HOMEWORK_ITERATION, HOMEWORK_WORKDIR and HOMEWORK_PROGRESS_FILE.
package agentcmd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"text/template"
	"time"

	"homework/engine/checks"
	"homework/engine/spec"
)

// Defaults for Options.
const (
	DefaultTimeout        = 30 * time.Minute
	DefaultMaxTimeout     = 4 * time.Hour
	DefaultOutputCap      = 1 << 20
	DefaultMaxOutputCap   = 64 << 20
	DefaultKillGrace      = 500 * time.Millisecond
	DefaultFlushInterval  = 250 * time.Millisecond
	DefaultFlushBytes     = 8 << 10
	DefaultProgressBytes  = 64 << 10
	DefaultProgressMax    = 40
	DefaultPromptProgress = 8 << 10
	// MinOutputCap is the smallest output_cap_bytes a run may ask for.
	MinOutputCap = 1 << 10
	// ProgressFile is the progress log's path under the work directory.
	ProgressFile = ".homework/progress.txt"
	// maxEnvNames bounds agent.env.
	maxEnvNames       = 64
	maxTemplateLen    = 64 << 10
	maxArgs           = 256
	defaultPathEnvVar = "/usr/local/bin:/usr/bin:/bin"
)

// BaseEnv returns the names of the server environment variables every agent
// process gets (when set). Nothing else of the server's environment is passed
// unless a run names it in agent.env.
func BaseEnv() []string {
	return []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "TERM"}
}

// Options configure an Executor. Zero fields take the defaults above.
type Options struct {
	// Root is the directory command runs must work under, from
	// --allow-command-runs; "" disables command runs.
	Root string
	// Now is the clock used for progress entries.
	Now func() time.Time
	// DefaultTimeout bounds an iteration whose run sets no timeout;
	// MaxTimeout is the largest agent.timeout_ms a run may ask for.
	DefaultTimeout, MaxTimeout time.Duration
	// DefaultOutputCap is how many bytes of output an iteration keeps when
	// the run sets no output_cap_bytes; MaxOutputCap bounds that field.
	DefaultOutputCap, MaxOutputCap int64
	// KillGrace is the time between SIGTERM and SIGKILL to the agent's
	// process group on timeout or cancel.
	KillGrace time.Duration
	// FlushInterval and FlushBytes batch the live agent_output events.
	FlushInterval time.Duration
	FlushBytes    int
	// ProgressMaxBytes and ProgressMaxEntries bound progress.txt; past
	// either, the oldest entries are folded into a summary paragraph.
	ProgressMaxBytes, ProgressMaxEntries int
	// PromptProgressBytes is how much of progress.txt's tail the prompt
	// carries.
	PromptProgressBytes int
	// LookupEnv reads the server's environment; os.LookupEnv when nil.
	LookupEnv func(string) (string, bool)
	// Git is the git binary; "git" when empty.
	Git string
	// Prices prices the tokens an agent reports without a cost of its own,
	// by the model it names (else the run's model); nil leaves such usage
	// unpriced. Creating a command run with a cost budget needs its model
	// priced here unless its CLI reports its own cost.
	Prices Pricer
}

// Executor runs command-agent iterations. It is safe for concurrent use by
// many runs.
type Executor struct {
	opts Options
	// progressMu serialises progress.txt rewrites, in case two runs share a
	// work directory.
	progressMu sync.Mutex
}

// New returns an Executor with opts' defaults filled in.
func New(opts Options) *Executor {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.DefaultTimeout <= 0 {
		opts.DefaultTimeout = DefaultTimeout
	}
	if opts.MaxTimeout <= 0 {
		opts.MaxTimeout = DefaultMaxTimeout
	}
	if opts.MaxTimeout < opts.DefaultTimeout {
		opts.MaxTimeout = opts.DefaultTimeout
	}
	if opts.DefaultOutputCap <= 0 {
		opts.DefaultOutputCap = DefaultOutputCap
	}
	if opts.MaxOutputCap <= 0 {
		opts.MaxOutputCap = DefaultMaxOutputCap
	}
	if opts.MaxOutputCap < opts.DefaultOutputCap {
		opts.MaxOutputCap = opts.DefaultOutputCap
	}
	if opts.KillGrace <= 0 {
		opts.KillGrace = DefaultKillGrace
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = DefaultFlushInterval
	}
	if opts.FlushBytes <= 0 {
		opts.FlushBytes = DefaultFlushBytes
	}
	if opts.ProgressMaxBytes <= 0 {
		opts.ProgressMaxBytes = DefaultProgressBytes
	}
	if opts.ProgressMaxEntries <= 0 {
		opts.ProgressMaxEntries = DefaultProgressMax
	}
	if opts.PromptProgressBytes <= 0 {
		opts.PromptProgressBytes = DefaultPromptProgress
	}
	if opts.LookupEnv == nil {
		opts.LookupEnv = os.LookupEnv
	}
	if opts.Git == "" {
		opts.Git = "git"
	}
	return &Executor{opts: opts}
}

// Enabled reports whether command runs are enabled on this server.
func (e *Executor) Enabled() bool { return e.opts.Root != "" }

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ValidateConfig checks a command run's agent configuration when the run is
// created and rewrites cfg.Agent.Workdir to its resolved absolute path. It
// returns an EFORBIDDEN *spec.Error when command runs are not enabled, the user
// is not an admin, or the work directory resolves outside the root, and an
// EINVALID one (with the field, such as "agent.argv") for anything else.
func (e *Executor) ValidateConfig(ctx context.Context, user *spec.User, cfg *spec.Config) error {
	if !e.Enabled() {
		return spec.Errorf(spec.EFORBIDDEN, "Command runs are not enabled on this server. An operator can enable them by starting the server with --allow-command-runs ROOT; work directories must then be under ROOT.")
	}
	if user == nil || !user.IsAdmin {
		return spec.Errorf(spec.EFORBIDDEN, "Only admins may create command runs.")
	}
	a := cfg.Agent
	if a != nil {
		if err := applyPreset(a); err != nil {
			return err
		}
	}
	if a == nil || len(a.Argv) == 0 || a.Argv[0] == "" {
		return spec.FieldError("agent.argv", "A command run needs agent.argv, the agent command to run, such as [\"claude\", \"-p\"].")
	}
	if len(a.Argv) > maxArgs {
		return spec.FieldError("agent.argv", "agent.argv may have at most %d arguments.", maxArgs)
	}
	for _, s := range a.Argv {
		if strings.ContainsRune(s, 0) {
			return spec.FieldError("agent.argv", "agent.argv may not contain NUL bytes.")
		}
	}
	if a.Workdir == "" {
		return spec.FieldError("agent.workdir", "A command run needs agent.workdir, a directory under %s.", e.opts.Root)
	}
	wd, err := e.resolveWorkdir(a.Workdir)
	if err != nil {
		return err
	}
	if a.TimeoutMS < 0 || time.Duration(a.TimeoutMS)*time.Millisecond > e.opts.MaxTimeout {
		return spec.FieldError("agent.timeout_ms", "agent.timeout_ms must be between 0 (the default, %d) and %d.",
			e.opts.DefaultTimeout.Milliseconds(), e.opts.MaxTimeout.Milliseconds())
	}
	if a.OutputCapBytes < 0 || (a.OutputCapBytes > 0 && a.OutputCapBytes < MinOutputCap) || a.OutputCapBytes > e.opts.MaxOutputCap {
		return spec.FieldError("agent.output_cap_bytes", "agent.output_cap_bytes must be 0 (the default, %d) or between %d and %d.",
			e.opts.DefaultOutputCap, MinOutputCap, e.opts.MaxOutputCap)
	}
	if len(a.Env) > maxEnvNames {
		return spec.FieldError("agent.env", "agent.env may name at most %d variables.", maxEnvNames)
	}
	for _, name := range a.Env {
		if !envNameRE.MatchString(name) {
			return spec.FieldError("agent.env", "agent.env lists names of server environment variables to pass through, such as \"ANTHROPIC_API_KEY\"; %q is not a variable name (values cannot be set here).", name)
		}
	}
	if a.PromptTemplate != "" {
		if len(a.PromptTemplate) > maxTemplateLen {
			return spec.FieldError("agent.prompt_template", "agent.prompt_template is longer than %d bytes.", maxTemplateLen)
		}
		t, err := template.New("prompt").Option("missingkey=error").Parse(a.PromptTemplate)
		if err != nil {
			return spec.FieldError("agent.prompt_template", "agent.prompt_template does not parse: %v.", err)
		}
		if err := t.Execute(discard{}, samplePromptData()); err != nil {
			return spec.FieldError("agent.prompt_template", "agent.prompt_template fails on sample data: %v.", err)
		}
	}
	if err := validateFormat(a); err != nil {
		return err
	}
	if err := e.checkBudgetsBind(cfg); err != nil {
		return err
	}
	a.Workdir = wd
	return nil
}

// resolveWorkdir returns wd's real absolute path, relative paths being
// relative to the root, or a *spec.Error when it is missing, not a directory
// or outside the root.
func (e *Executor) resolveWorkdir(wd string) (string, error) {
	root, err := filepath.Abs(e.opts.Root)
	if err == nil {
		root, err = filepath.EvalSymlinks(root)
	}
	if err != nil {
		return "", spec.Errorf(spec.EUNAVAILABLE, "The server's command-run root %s is not usable: %v.", e.opts.Root, err)
	}
	if !filepath.IsAbs(wd) {
		wd = filepath.Join(root, wd)
	}
	wd = filepath.Clean(wd)
	outside := &spec.Error{Code: spec.EFORBIDDEN, Field: "agent.workdir",
		Message: fmt.Sprintf("The work directory must be under %s, the server's command-run root.", e.opts.Root)}
	if !checks.Within(root, wd) && !checks.Within(filepath.Clean(e.opts.Root), wd) {
		return "", outside
	}
	real, err := filepath.EvalSymlinks(wd)
	if err != nil {
		if os.IsNotExist(err) {
			return "", spec.FieldError("agent.workdir", "The work directory %s does not exist.", wd)
		}
		return "", spec.FieldError("agent.workdir", "The work directory %s cannot be resolved: %v.", wd, err)
	}
	if !checks.Within(root, real) {
		return "", outside
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", spec.FieldError("agent.workdir", "The work directory %s cannot be read: %v.", wd, err)
	}
	if !fi.IsDir() {
		return "", spec.FieldError("agent.workdir", "%s is not a directory.", wd)
	}
	return real, nil
}

// Environ returns the environment the agent process of a run gets (see the
// package documentation). The engine should run the run's command checks
// with it too (checks.Env.Environ).
func (e *Executor) Environ(in *spec.Input) []string {
	var env []string
	seen := map[string]bool{}
	add := func(name string) {
		if seen[name] {
			return
		}
		seen[name] = true
		if v, ok := e.opts.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		} else if name == "PATH" {
			env = append(env, name+"="+defaultPathEnvVar)
		}
	}
	for _, n := range BaseEnv() {
		add(n)
	}
	if in != nil && in.Config != nil && in.Config.Agent != nil {
		for _, n := range in.Config.Agent.Env {
			if envNameRE.MatchString(n) && !strings.HasPrefix(n, "HOMEWORK_") {
				add(n)
			}
		}
	}
	if in != nil {
		env = append(env, "HOMEWORK_RUN_ID="+in.RunID, fmt.Sprintf("HOMEWORK_ITERATION=%d", in.Iteration))
		if in.Config != nil && in.Config.Agent != nil {
			env = append(env, "HOMEWORK_WORKDIR="+in.Config.Agent.Workdir,
				"HOMEWORK_PROGRESS_FILE="+filepath.Join(in.Config.Agent.Workdir, filepath.FromSlash(ProgressFile)))
		}
	}
	return env
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

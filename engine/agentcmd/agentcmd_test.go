package agentcmd_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"homework/engine/agentcmd"
	"homework/engine/checks"
	"homework/engine/spec"
	"homework/engine/waitfor"
)

var admin = &spec.User{ID: 1, Email: "a@example.com", IsAdmin: true}

func TestValidateConfig(t *testing.T) {
	e, wd := setup(t, agentcmd.Options{})
	root := filepath.Dir(wd)
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(wd, filepath.Join(root, "alias")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, root, "file.txt", "x")
	ok := func() *spec.Config { return commandConfig([]string{"claude", "-p"}, wd) }

	t.Run("a good configuration is accepted and its workdir resolved", func(t *testing.T) {
		cfg := ok()
		cfg.Agent.Workdir = filepath.Join(root, "alias")
		cfg.Agent.Env = []string{"ANTHROPIC_API_KEY"}
		cfg.Agent.PromptTemplate = "{{.Objective}}\n{{.Instructions}}"
		if err := e.ValidateConfig(context.Background(), admin, cfg); err != nil {
			t.Fatal(err)
		}
		if cfg.Agent.Workdir != wd {
			t.Fatalf("workdir = %q, want %q", cfg.Agent.Workdir, wd)
		}
	})
	t.Run("a relative workdir is relative to the root", func(t *testing.T) {
		cfg := ok()
		cfg.Agent.Workdir = "work"
		if err := e.ValidateConfig(context.Background(), admin, cfg); err != nil || cfg.Agent.Workdir != wd {
			t.Fatalf("err %v, workdir %q", err, cfg.Agent.Workdir)
		}
	})

	tests := []struct {
		name   string
		exec   *agentcmd.Executor
		user   *spec.User
		modify func(*spec.Config)
		code   string
		field  string
	}{
		{"command runs not enabled are refused", agentcmd.New(agentcmd.Options{}), admin, nil, spec.EFORBIDDEN, ""},
		{"a user who is not an admin is refused", e, &spec.User{ID: 2}, nil, spec.EFORBIDDEN, ""},
		{"no user is refused", e, nil, nil, spec.EFORBIDDEN, ""},
		{"a missing agent is refused", e, admin, func(c *spec.Config) { c.Agent = nil }, spec.EINVALID, "agent.argv"},
		{"an empty argv is refused", e, admin, func(c *spec.Config) { c.Agent.Argv = nil }, spec.EINVALID, "agent.argv"},
		{"an empty program is refused", e, admin, func(c *spec.Config) { c.Agent.Argv = []string{""} }, spec.EINVALID, "agent.argv"},
		{"a missing workdir field is refused", e, admin, func(c *spec.Config) { c.Agent.Workdir = "" }, spec.EINVALID, "agent.workdir"},
		{"a workdir escaping through .. is refused", e, admin, func(c *spec.Config) { c.Agent.Workdir = wd + "/../.." }, spec.EFORBIDDEN, "agent.workdir"},
		{"a relative workdir escaping through .. is refused", e, admin, func(c *spec.Config) { c.Agent.Workdir = "../" }, spec.EFORBIDDEN, "agent.workdir"},
		{"a workdir escaping through a symlink is refused", e, admin, func(c *spec.Config) { c.Agent.Workdir = filepath.Join(root, "escape") }, spec.EFORBIDDEN, "agent.workdir"},
		{"a workdir outside the root is refused", e, admin, func(c *spec.Config) { c.Agent.Workdir = outside }, spec.EFORBIDDEN, "agent.workdir"},
		{"a missing workdir is refused", e, admin, func(c *spec.Config) { c.Agent.Workdir = filepath.Join(root, "nope") }, spec.EINVALID, "agent.workdir"},
		{"a workdir that is a file is refused", e, admin, func(c *spec.Config) { c.Agent.Workdir = filepath.Join(root, "file.txt") }, spec.EINVALID, "agent.workdir"},
		{"a negative timeout is refused", e, admin, func(c *spec.Config) { c.Agent.TimeoutMS = -1 }, spec.EINVALID, "agent.timeout_ms"},
		{"a timeout over the maximum is refused", e, admin, func(c *spec.Config) { c.Agent.TimeoutMS = (agentcmd.DefaultMaxTimeout + time.Second).Milliseconds() }, spec.EINVALID, "agent.timeout_ms"},
		{"a tiny output cap is refused", e, admin, func(c *spec.Config) { c.Agent.OutputCapBytes = 10 }, spec.EINVALID, "agent.output_cap_bytes"},
		{"a huge output cap is refused", e, admin, func(c *spec.Config) { c.Agent.OutputCapBytes = agentcmd.DefaultMaxOutputCap + 1 }, spec.EINVALID, "agent.output_cap_bytes"},
		{"an env value instead of a name is refused", e, admin, func(c *spec.Config) { c.Agent.Env = []string{"TOKEN=secret"} }, spec.EINVALID, "agent.env"},
		{"a template that does not parse is refused", e, admin, func(c *spec.Config) { c.Agent.PromptTemplate = "{{.Objective" }, spec.EINVALID, "agent.prompt_template"},
		{"a template naming an unknown field is refused", e, admin, func(c *spec.Config) { c.Agent.PromptTemplate = "{{.Nope}}" }, spec.EINVALID, "agent.prompt_template"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := ok()
			if tt.modify != nil {
				tt.modify(cfg)
			}
			err := tt.exec.ValidateConfig(context.Background(), tt.user, cfg)
			var de *spec.Error
			if !errors.As(err, &de) {
				t.Fatalf("ValidateConfig = %v, want a *spec.Error", err)
			}
			if de.Code != tt.code || de.Field != tt.field || de.Message == "" {
				t.Fatalf("ValidateConfig = code %q field %q message %q, want %q %q", de.Code, de.Field, de.Message, tt.code, tt.field)
			}
		})
	}
	t.Run("the disabled message says how to enable command runs", func(t *testing.T) {
		err := agentcmd.New(agentcmd.Options{}).ValidateConfig(context.Background(), admin, ok())
		if !strings.Contains(spec.ErrorMessage(err), "--allow-command-runs") {
			t.Fatalf("message = %q", spec.ErrorMessage(err))
		}
	})
}

func TestIterateCompleteWhileCheckFails(t *testing.T) {
	e, wd := setup(t, agentcmd.Options{})
	agent := writeScript(t, wd, "agent.sh", `cat >/dev/null; echo "All done!"; echo "<promise>COMPLETE</promise>"`)
	cfg := commandConfig([]string{agent}, wd)
	cfg.Completion.Checks = []spec.CheckSpec{{Type: spec.CheckCommand, Name: "tests", Argv: []string{"sh", "-c", "echo 2 tests failed; exit 1"}}}
	in := input("r", 1, cfg, newHost())
	res := iterate(t, e, in)
	if res.Promise == nil || res.Promise.Kind != spec.PromiseComplete {
		t.Fatalf("promise = %+v", res.Promise)
	}
	if res.Error != "" || res.ToolCalls != 1 || res.OutputHash == "" || res.DiffHash == "" || res.Progress != res.DiffHash {
		t.Fatalf("result = %+v", res)
	}
	results := checks.Run(context.Background(), cfg.Completion.Checks, checks.Env{Workdir: wd, Output: res.Output})
	if results[0].Passed || !strings.Contains(results[0].OutputTail, "2 tests failed") {
		t.Fatalf("check = %+v", results[0])
	}
}

func TestIterateBlockedWithReason(t *testing.T) {
	e, wd := setup(t, agentcmd.Options{})
	agent := writeScript(t, wd, "agent.sh", `cat >/dev/null
echo "Tried to migrate the schema."
echo "<Promise>blocked</Promise>"
echo "Reason: The migration needs DBA approval."
echo "Blocking issue: no credentials for prod."
echo
echo "unrelated trailing text"`)
	res := iterate(t, e, input("r", 1, commandConfig([]string{agent}, wd), newHost()))
	if res.Promise == nil || res.Promise.Kind != spec.PromiseBlocked {
		t.Fatalf("promise = %+v", res.Promise)
	}
	want := "The migration needs DBA approval.\nBlocking issue: no credentials for prod."
	if res.Promise.Reason != want {
		t.Fatalf("reason = %q, want %q", res.Promise.Reason, want)
	}
}

func TestIterateEchoedPromptIsNoPromise(t *testing.T) {
	e, wd := setup(t, agentcmd.Options{})
	tests := []struct{ name, script string }{
		{"an agent echoing the whole prompt", `cat`},
		{"an agent echoing the prompt twice with CRLF endings", `p=$(cat); printf '%s\n' "$p" | sed 's/$/\r/'; echo "and again"; printf '%s\n' "$p"`},
		{"an agent quoting the instruction lines", `grep -i promise | sed 's/^/> /'`},
		{"an agent echoing a promise inside a comment", `cat >/dev/null; echo "<!-- <promise>COMPLETE</promise> -->"`},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			agent := writeScript(t, wd, fmt.Sprintf("agent%d.sh", i), tt.script)
			res := iterate(t, e, input("r", 1, commandConfig([]string{agent}, wd), newHost()))
			if !strings.Contains(strings.ToLower(res.Output), "<promise>") {
				t.Fatalf("the agent did not print a promise tag: %q", res.Output)
			}
			if res.Promise != nil {
				t.Fatalf("promise %+v detected in an echo:\n%s", res.Promise, res.Output)
			}
		})
	}
	t.Run("an agent echoing the prompt and then promising counts", func(t *testing.T) {
		agent := writeScript(t, wd, "agent-real.sh", `cat; echo "Done."; echo "<promise>COMPLETE</promise>"`)
		res := iterate(t, e, input("r", 1, commandConfig([]string{agent}, wd), newHost()))
		if res.Promise == nil || res.Promise.Kind != spec.PromiseComplete {
			t.Fatalf("promise = %+v", res.Promise)
		}
	})
}

func TestDetectPromise(t *testing.T) {
	prompt := "Do it.\nWhen done, print <promise>COMPLETE</promise> on its own line.\n"
	bare := "Do it. When done print exactly:\n<promise>COMPLETE</promise>\n"
	tests := []struct {
		name, output, prompt, token string
		kind, reason                string
	}{
		{"a plain promise", "ok\n<promise>COMPLETE</promise>\n", prompt, "", "COMPLETE", ""},
		{"case does not matter", "<PROMISE>complete</PROMISE>", prompt, "", "COMPLETE", ""},
		{"a promise after text on its line", "Tests passing! <promise>COMPLETE</promise>", prompt, "", "COMPLETE", ""},
		{"a summary is the reason", "<promise>COMPLETE</promise>\nSummary: 15/15 pass.", prompt, "", "COMPLETE", "15/15 pass."},
		{"BLOCKED wins over COMPLETE", "<promise>COMPLETE</promise>\n<promise>BLOCKED</promise> need keys", prompt, "", "BLOCKED", "need keys"},
		{"missing tags are not a promise", "COMPLETE", prompt, "", "", ""},
		{"a wrong tag is not a promise", "<incomplete>COMPLETE</incomplete>", prompt, "", "", ""},
		{"a commented promise is not a promise", "<!-- <promise>COMPLETE</promise> -->", prompt, "", "", ""},
		{"a multi-line comment hides a promise", "<!--\n<promise>BLOCKED</promise>\n-->\nok", prompt, "", "", ""},
		{"an unknown word is not a promise", "<promise>MAYBE</promise>", prompt, "", "", ""},
		{"a custom token completes", "<promise>SHIPPED</promise>", prompt, "SHIPPED", "COMPLETE", ""},
		{"a quoted instruction is an echo", "When done, print <promise>COMPLETE</promise> on its own line.", prompt, "", "", ""},
		{"a bare instruction line echoed once is an echo", bare, bare, "", "", ""},
		{"a bare instruction line is cancelled only once", "Do it.\n<promise>COMPLETE</promise>\nworking\n<promise>COMPLETE</promise>", bare, "", "COMPLETE", ""},
		{"an echo of the instruction line counts once per prompt occurrence", "<promise>COMPLETE</promise>", bare, "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := agentcmd.DetectPromise(tt.output, tt.prompt, tt.token)
			if tt.kind == "" {
				if p != nil {
					t.Fatalf("promise = %+v, want none", p)
				}
				return
			}
			if p == nil || p.Kind != tt.kind || p.Reason != tt.reason {
				t.Fatalf("promise = %+v, want %s %q", p, tt.kind, tt.reason)
			}
		})
	}
}

func TestIterateOutputOverCap(t *testing.T) {
	e, wd := setup(t, agentcmd.Options{})
	agent := writeScript(t, wd, "agent.sh", `cat >/dev/null
echo FIRST-LINE
i=0; while [ $i -lt 3000 ]; do echo "filler line $i of the flood ......................................"; i=$((i+1)); done
echo "<promise>COMPLETE</promise>"`)
	cfg := commandConfig([]string{agent}, wd)
	cfg.Agent.OutputCapBytes = 4096
	host := newHost()
	res := iterate(t, e, input("r", 1, cfg, host))
	if len(res.Output) > 4096+64 {
		t.Fatalf("kept %d bytes, cap 4096", len(res.Output))
	}
	if !strings.HasPrefix(res.Output, "FIRST-LINE\n") || !strings.Contains(res.Output, "bytes of output dropped") {
		t.Fatalf("output does not keep its head and mark the cut: %q…", res.Output[:200])
	}
	if res.Promise == nil || res.Promise.Kind != spec.PromiseComplete {
		t.Fatalf("the promise at the end was lost: %+v", res.Promise)
	}
	exit := host.last(spec.EventAgentExit).(spec.AgentExitData)
	total, dropped := exit.OutputBytes, exit.DroppedBytes
	if total < 200000 || dropped <= 0 || total-dropped > 4096 {
		t.Fatalf("output_bytes %d dropped_bytes %d", total, dropped)
	}
	if n := len(host.output()); n > 4096 {
		t.Fatalf("streamed %d bytes, cap 4096", n)
	}
	if !host.last(spec.EventAgentOutput).(spec.AgentOutputData).Truncated {
		t.Fatal("the last output event does not say it was truncated")
	}
	if !strings.Contains(res.Summary, "dropped") {
		t.Fatalf("summary = %q", res.Summary)
	}
}

func TestIterateStreamsOutputInBatches(t *testing.T) {
	e, wd := setup(t, agentcmd.Options{FlushInterval: time.Hour, FlushBytes: 1024})
	agent := writeScript(t, wd, "agent.sh", `cat >/dev/null; i=0; while [ $i -lt 500 ]; do echo "line $i"; i=$((i+1)); done`)
	host := newHost()
	res := iterate(t, e, input("r", 1, commandConfig([]string{agent}, wd), host))
	if host.output() != res.Output {
		t.Fatal("the streamed output differs from the captured output")
	}
	host.mu.Lock()
	n := 0
	for _, ev := range host.events {
		if ev.typ == spec.EventAgentOutput {
			n++
		}
	}
	host.mu.Unlock()
	// 500 writes of ~8 bytes batched by 1 KiB: a handful of events, not 500.
	if n == 0 || n > 20 {
		t.Fatalf("%d output events for %d bytes", n, len(res.Output))
	}
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	if !waitfor.Gone(pid, 10*time.Second) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("process %d outlived the agent", pid)
	}
}

func readPid(t *testing.T, name string) int {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func TestIterateTimeoutKillsProcessGroup(t *testing.T) {
	e, wd := setup(t, agentcmd.Options{})
	agent := writeScript(t, wd, "agent.sh", `cat >/dev/null
sleep 300 &
echo $! > child.pid
echo "working"
trap '' TERM
wait`)
	cfg := commandConfig([]string{agent}, wd)
	cfg.Agent.TimeoutMS = 300
	// The agent ignores TERM and waits on a 300 s child: Iterate ends within
	// iterate's guard, with a timeout, only by killing the process group.
	res := iterate(t, e, input("r", 1, cfg, newHost()))
	if res.ErrorFingerprint != "timeout" || !strings.Contains(res.Error, "timed out") {
		t.Fatalf("error %q fingerprint %q", res.Error, res.ErrorFingerprint)
	}
	if !strings.Contains(res.Output, "working") {
		t.Fatalf("output = %q", res.Output)
	}
	waitGone(t, readPid(t, filepath.Join(wd, "child.pid")))
}

func TestIterateSweepsChildrenOfAnAgentThatExited(t *testing.T) {
	e, wd := setup(t, agentcmd.Options{})
	agent := writeScript(t, wd, "agent.sh", `cat >/dev/null
sleep 300 &
echo $! > child.pid
echo "left a child behind"`)
	// The orphan keeps the output pipe open for 300 s: Iterate ends within
	// iterate's guard only if it does not wait for it.
	res := iterate(t, e, input("r", 1, commandConfig([]string{agent}, wd), newHost()))
	if res.Error != "" {
		t.Fatalf("error = %q", res.Error)
	}
	waitGone(t, readPid(t, filepath.Join(wd, "child.pid")))
}

func TestIterateCancelReturnsPromptly(t *testing.T) {
	e, wd := setup(t, agentcmd.Options{})
	agent := writeScript(t, wd, "agent.sh", `cat >/dev/null
sleep 300 &
echo $! > child.pid
echo started
wait`)
	host := newHost()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type outcome struct {
		res *spec.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := e.Iterate(ctx, input("r", 1, commandConfig([]string{agent}, wd), host))
		done <- outcome{res, err}
	}()
	host.waitOutput(t, "started")
	cancel()
	// The agent waits on a 300 s child; the guard is far below that.
	var o outcome
	select {
	case o = <-done:
	case <-time.After(iterateGuard):
		t.Fatal("Iterate did not return after cancel")
	}
	if !errors.Is(o.err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", o.err)
	}
	if o.res == nil || !strings.Contains(o.res.Output, "started") {
		t.Fatalf("result = %+v", o.res)
	}
	waitGone(t, readPid(t, filepath.Join(wd, "child.pid")))
}

func TestIterateNonZeroExitFingerprint(t *testing.T) {
	e, wd := setup(t, agentcmd.Options{})
	failing := writeScript(t, wd, "fail.sh", `cat >/dev/null
echo "$(date -u +%Y-%m-%dT%H:%M:%S.%NZ) starting attempt $$"
echo "run id $(od -An -N4 -tx4 /dev/urandom | tr -d ' ')"
echo "error: connection refused at /tmp/build-$$/main.go:$$ after ${RANDOM:-7}ms" >&2
exit 3`)
	other := writeScript(t, wd, "other.sh", `cat >/dev/null; echo "panic: nil map" >&2; exit 3`)
	cfg := commandConfig([]string{failing}, wd)
	r1 := iterate(t, e, input("r", 1, cfg, newHost()))
	r2 := iterate(t, e, input("r", 2, cfg, newHost()))
	if r1.Error == "" || !strings.Contains(r1.Error, "exit status 3") {
		t.Fatalf("error = %q", r1.Error)
	}
	if r1.Fatal != nil {
		t.Fatalf("a failing agent is fatal: %+v", r1.Fatal)
	}
	if r1.Output == r2.Output {
		t.Fatal("the test agent printed the same output twice; it should vary")
	}
	if r1.ErrorFingerprint == "" || r1.ErrorFingerprint != r2.ErrorFingerprint {
		t.Fatalf("fingerprints differ: %q vs %q", r1.ErrorFingerprint, r2.ErrorFingerprint)
	}
	r3 := iterate(t, e, input("r", 3, commandConfig([]string{other}, wd), newHost()))
	if r3.ErrorFingerprint == r1.ErrorFingerprint {
		t.Fatal("a different failure has the same fingerprint")
	}
}

func TestIterateAgentThatCannotStartIsFatal(t *testing.T) {
	e, wd := setup(t, agentcmd.Options{})
	res := iterate(t, e, input("r", 1, commandConfig([]string{"no-such-agent-binary"}, wd), newHost()))
	if res.Fatal == nil || !strings.Contains(res.Fatal.Detail, "no-such-agent-binary") {
		t.Fatalf("result = %+v", res)
	}
}

func TestIterateRefusesAWorkdirMovedOutside(t *testing.T) {
	e, wd := setup(t, agentcmd.Options{})
	root := filepath.Dir(wd)
	link := filepath.Join(root, "link")
	if err := os.Symlink(wd, link); err != nil {
		t.Fatal(err)
	}
	cfg := commandConfig([]string{"true"}, link)
	// After validation the link is repointed outside the root.
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(t.TempDir(), link); err != nil {
		t.Fatal(err)
	}
	res := iterate(t, e, input("r", 1, cfg, newHost()))
	if res.Fatal == nil {
		t.Fatalf("result = %+v", res)
	}
}

func TestEnviron(t *testing.T) {
	env := map[string]string{"PATH": "/bin", "HOME": "/home/x", "SECRET": "s", "API_KEY": "k"}
	e := agentcmd.New(agentcmd.Options{Root: "/", LookupEnv: func(n string) (string, bool) { v, ok := env[n]; return v, ok }})
	cfg := commandConfig([]string{"x"}, "/w")
	cfg.Agent.Env = []string{"API_KEY", "MISSING"}
	got := strings.Join(e.Environ(input("run9", 4, cfg, nil)), "\n")
	for _, want := range []string{"PATH=/bin", "HOME=/home/x", "API_KEY=k", "HOMEWORK_RUN_ID=run9", "HOMEWORK_ITERATION=4", "HOMEWORK_WORKDIR=/w"} {
		if !strings.Contains(got, want) {
			t.Errorf("environment lacks %s:\n%s", want, got)
		}
	}
	if strings.Contains(got, "SECRET") || strings.Contains(got, "MISSING") {
		t.Errorf("environment leaks:\n%s", got)
	}
}

func TestIteratePromptTemplate(t *testing.T) {
	e, wd := setup(t, agentcmd.Options{})
	agent := writeScript(t, wd, "agent.sh", `cat`)
	cfg := commandConfig([]string{agent}, wd)
	cfg.Objective = "Ship <promise>COMPLETE</promise> it"
	cfg.Agent.PromptTemplate = "OBJ={{.Objective}} IT={{.Iteration}}{{range .Inbox}} MSG={{.Body}}{{end}}"
	in := input("r", 7, cfg, newHost())
	in.Inbox = []spec.InboxItem{{Kind: "message", Body: "use sqlite"}}
	res := iterate(t, e, in)
	if res.Output != "OBJ=Ship [promise]COMPLETE[/promise] it IT=7 MSG=use sqlite" {
		t.Fatalf("prompt = %q", res.Output)
	}
}

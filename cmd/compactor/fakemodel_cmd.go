package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/compactor/compactor/internal/fakeupstream"
)

// fakeModelListen is where compactor fake-model listens without --listen.
const fakeModelListen = "127.0.0.1:8099"

// fakeModelCommand serves the scripted model of package fakeupstream in its agent
// mode, so that a real agent (Claude Code, Codex, Gemini CLI, OpenCode), alone or
// behind the proxy, can run without a provider's key.
var fakeModelCommand = &command{
	name:    "fake-model",
	summary: "serve a scripted model on the OpenAI, Anthropic, Responses and Gemini wires, to run agents without a key",
	about: `Listens on --listen (default ` + fakeModelListen + `; 127.0.0.1:0 picks a free port) and
prints the address it listens on as one line on stdout, then logs one line a request on
stderr. It answers, with any key:

  POST /v1/chat/completions                     OpenAI Chat Completions
  POST /v1/messages                             Anthropic Messages (and /count_tokens)
  POST /v1/responses                            OpenAI Responses
  POST /v1beta/models/<model>:generateContent   Gemini (also :streamGenerateContent?alt=sse
                                                and :countTokens)
  GET  /v1/models                               one model

streamed or not as the request asks, as a coding model would: a user prompt gets one
call of the agent's shell tool (Claude Code's Bash, Codex's exec_command, shell_command
or shell, Gemini CLI's run_shell_command, OpenCode's bash: the first of them the
request declares) running "` + fakeupstream.AgentCommand + `"; the tool's result gets a text that
quotes every FACT-... token the request carries (so you can see whether an early fact
still reaches the model); the agent's compaction prompt gets a summary in the shape the
agent expects, keeping every FACT- token. Usage counts 4 bytes a token of the
conversation as sent, and as cached the prefix shared with the previous request of the
same conversation (X-Compactor-Conversation, else the wire and model).

Point an agent at it directly, or at a compactor proxy whose upstreams are it:
  ANTHROPIC_BASE_URL=http://127.0.0.1:8099 ANTHROPIC_API_KEY=fake claude
  OPENAI_BASE_URL=http://127.0.0.1:8099/v1 OPENAI_API_KEY=fake ...
  GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:8099 GEMINI_API_KEY=fake gemini
SIGINT or SIGTERM stops it (exit 0).`,
	define: func(fs *flagSet) func(context.Context, *call) error {
		listen := fs.String("listen", "", "HOST:PORT", "the address to listen on (default "+fakeModelListen+")")
		quiet := fs.Bool("quiet", "q", "log nothing on stderr")
		return func(ctx context.Context, c *call) error {
			if len(c.args) > 0 {
				return usagef("fake-model takes no arguments, got %s", strings.Join(quoteAll(c.args), " "))
			}
			addr := *listen
			if addr == "" {
				addr = fakeModelListen
			}
			var log io.Writer
			if !*quiet {
				log = c.std.err
			}
			return runFakeModel(ctx, addr, c.std.out, log)
		}
	},
}

// runFakeModel serves the agent-mode fake model on addr until ctx ends: it prints
// the address it listens on to out, and a line a request to log (nil: none).
func runFakeModel(ctx context.Context, addr string, out, log io.Writer) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return newError(errConfig, err, "--listen %s: %v", addr, err)
	}
	s := fakeupstream.NewHandler()
	s.SetURL("http://" + ln.Addr().String())
	s.Respond = s.AgentModel
	if log != nil {
		var mu sync.Mutex
		s.Answered = func(r *fakeupstream.Request, rep fakeupstream.Reply) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(log, "%s %s %s model=%s stream=%t: %s\n", time.Now().UTC().Format(time.TimeOnly), r.API, r.Path, r.Model, r.Stream, describeReply(r, rep))
		}
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if _, err := fmt.Fprintln(out, ln.Addr().String()); err != nil {
		srv.Close()
		return err
	}
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// describeReply is what the log says of one answer.
func describeReply(r *fakeupstream.Request, rep fakeupstream.Reply) string {
	var d string
	switch {
	case rep.Status != 0 && rep.Status != http.StatusOK:
		d = fmt.Sprintf("error %d", rep.Status)
	case r.Compaction != "" && len(rep.ToolCalls) == 0:
		d = fmt.Sprintf("%s compaction summary, %d facts kept", r.Compaction, len(fakeupstream.Facts(rep.Text)))
	case len(rep.ToolCalls) > 0:
		d = "tool call " + rep.ToolCalls[0].Name + " " + rep.ToolCalls[0].Arguments
	default:
		d = fmt.Sprintf("text quoting %d facts", len(fakeupstream.Facts(rep.Text)))
	}
	if r.Usage != nil {
		d += fmt.Sprintf(" (input %d tokens, %d cached, output %d)", r.Usage.Input, r.Usage.CacheRead, r.Usage.Output)
	}
	return d
}

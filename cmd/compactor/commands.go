package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
)

// clientURL is where the client commands connect: COMPACTOR_NATS_URL, or the embedded
// server a local `compactor serve` runs on COMPACTOR_LISTEN.
func clientURL(env Env) string {
	if env.NATSURL != "" {
		return env.NATSURL
	}
	return "nats://" + env.Listen
}

// connect opens a client of a running compactor.
func connect(ctx context.Context, env Env) (*pipeline.Client, *nats.Conn, error) {
	nc, err := jetstream.Connect(clientURL(env), "compactor-cli", zerolog.Nop(), env.natsAuth().Option(), nats.Timeout(5*time.Second))
	if err != nil {
		return nil, nil, connectError(err)
	}
	c, err := pipeline.New(ctx, nc, pipeline.WithConfig(env.jetstream()))
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return c, nc, nil
}

// connectError adds to a failed connection what to check: whether NATS runs, or the
// variables of the credentials or TLS it refused.
func connectError(err error) error {
	switch {
	case jetstream.Unreachable(err):
		return fmt.Errorf("%w (is `compactor serve` running, or COMPACTOR_NATS_URL set?)", err)
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked),
		errors.Is(err, nats.ErrAccountAuthExpired):
		return fmt.Errorf("%w (check COMPACTOR_NATS_CREDS, COMPACTOR_NATS_NKEY, COMPACTOR_NATS_TOKEN, "+
			"COMPACTOR_NATS_USER and COMPACTOR_NATS_PASSWORD, or the user in COMPACTOR_NATS_URL)", err)
	case jetstream.Refused(err):
		return fmt.Errorf("%w (check COMPACTOR_NATS_CA, COMPACTOR_NATS_CERT and COMPACTOR_NATS_KEY, "+
			"and whether COMPACTOR_NATS_URL should be tls://)", err)
	}
	return err
}

// oneConversation parses "<conv> [flags]" (flags may also come first).
func oneConversation(fs *flag.FlagSet, args []string) (string, error) {
	fs.SetOutput(io.Discard)
	var conv string
	for {
		if err := fs.Parse(args); err != nil {
			return "", usagef("%s: %v", fs.Name(), err)
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		if conv != "" {
			return "", usagef("%s takes one conversation id, got %q and %q", fs.Name(), conv, args[0])
		}
		conv, args = args[0], args[1:]
	}
	if conv == "" {
		return "", usagef("%s needs a conversation id", fs.Name())
	}
	if err := schemas.ValidateConversationID(conv); err != nil {
		return "", usagef("%v", err)
	}
	return conv, nil
}

// maxLine bounds one JSONL line on stdin.
const maxLine = 64 << 20

func publishCmd(ctx context.Context, env Env, args []string, std stdio) error {
	fs := flag.NewFlagSet("publish", flag.ContinueOnError)
	idPrefix := fs.String("msg-id-prefix", "", "make a re-run of the same input idempotent: line N gets Nats-Msg-Id <prefix>-N; ids are de-duplicated across the whole CHAT stream, so use a fresh prefix (a UUID) for every other input")
	conv, err := oneConversation(fs, args)
	if err != nil {
		return err
	}
	c, nc, err := connect(ctx, env)
	if err != nil {
		return err
	}
	defer nc.Close()
	sc := bufio.NewScanner(std.in)
	sc.Buffer(make([]byte, 0, 1<<20), maxLine)
	line, failed, published := 0, 0, 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		m, err := schemas.DecodeMessage([]byte(text))
		if err == nil {
			var opts []pipeline.PublishOption
			if *idPrefix != "" {
				opts = append(opts, pipeline.MsgID(fmt.Sprintf("%s-%d", *idPrefix, line)))
			}
			var seq uint64
			if seq, err = c.Publish(ctx, conv, m, opts...); err == nil {
				published++
				fmt.Fprintln(std.out, seq)
				continue
			}
		}
		failed++
		fmt.Fprintf(std.err, "line %d: %v\n", line, err)
		if ctx.Err() != nil {
			break
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read stdin after line %d: %w", line, err)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d messages not published (see above)", failed, failed+published)
	}
	return nil
}

func contextCmd(ctx context.Context, env Env, args []string, std stdio) error {
	fs := flag.NewFlagSet("context", flag.ContinueOnError)
	raw := fs.Bool("raw", false, "keep Compactor's metadata on messages")
	maxTokens := fs.Int("max-tokens", 0, "cut the context at read time to this many tokens")
	atLeast := fs.Uint64("at-least-seq", 0, "wait until the read covers this sequence")
	conv, err := oneConversation(fs, args)
	if err != nil {
		return err
	}
	c, nc, err := connect(ctx, env)
	if err != nil {
		return err
	}
	defer nc.Close()
	var opts []pipeline.ContextOption
	if *raw {
		opts = append(opts, pipeline.Raw())
	}
	if *maxTokens > 0 {
		opts = append(opts, pipeline.MaxTokens(*maxTokens))
	}
	if *atLeast > 0 {
		opts = append(opts, pipeline.AtLeastSeq(*atLeast))
	}
	cx, err := c.Context(ctx, conv, opts...)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(std.out)
	for i := range cx.Messages {
		b, err := cx.Messages[i].Encode()
		if err != nil {
			return err
		}
		w.Write(b)
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, s := range cx.Skipped {
		fmt.Fprintf(std.err, "skipped seq %d: %s\n", s.Seq, s.Reason)
	}
	fmt.Fprintf(std.err, "%s: generation %d, %d messages, about %d tokens, tail from seq %d%s\n",
		conv, cx.Generation, len(cx.Messages), cx.Tokens, cx.TailStartSeq, map[bool]string{true: " (degraded to fit --max-tokens)"}[cx.Degraded])
	return nil
}

func compactCmd(ctx context.Context, env Env, args []string, std stdio) error {
	fs := flag.NewFlagSet("compact", flag.ContinueOnError)
	instructions := fs.String("instructions", "", "extra wishes for the summarizer (data, never overriding its rules)")
	wait := fs.Duration("wait", 0, "wait up to this long for the outcome (the service caps it at 5m)")
	conv, err := oneConversation(fs, args)
	if err != nil {
		return err
	}
	if *wait < 0 {
		return usagef("--wait must not be negative")
	}
	c, nc, err := connect(ctx, env)
	if err != nil {
		return err
	}
	defer nc.Close()
	opts := []pipeline.CompactOption{pipeline.Instructions(*instructions), pipeline.Wait(*wait)}
	r, err := c.Compact(ctx, conv, opts...)
	if err != nil {
		return err
	}
	if err := writeJSON(std.out, r); err != nil {
		return err
	}
	switch r.Status {
	case pipeline.StatusBusy:
		return errors.New("a compaction is already pending for this conversation; your instructions were not queued: ask again when it completes")
	case pipeline.StatusFailed:
		return fmt.Errorf("compaction failed: %s", r.Error)
	case pipeline.StatusQueued:
		if *wait > 0 {
			return fmt.Errorf("no outcome yet: %s", r.Error)
		}
	}
	return nil
}

// forgetCmd deletes a conversation everywhere through the compactor service
// (compactor.forget), which holds the purge rights, and prints what was deleted
// (schemas.ForgetResponse).
func forgetCmd(ctx context.Context, env Env, args []string, std stdio) error {
	conv, err := oneConversation(flag.NewFlagSet("forget", flag.ContinueOnError), args)
	if err != nil {
		return err
	}
	c, nc, err := connect(ctx, env)
	if err != nil {
		return err
	}
	defer nc.Close()
	r, err := c.Forget(ctx, conv)
	if err != nil {
		return err
	}
	return writeJSON(std.out, r)
}

func statusCmd(ctx context.Context, env Env, args []string, std stdio) error {
	if len(args) > 1 {
		return usagef("status takes at most one conversation id")
	}
	c, nc, err := connect(ctx, env)
	if err != nil {
		return err
	}
	defer nc.Close()
	if len(args) == 1 {
		conv := args[0]
		if err := schemas.ValidateConversationID(conv); err != nil {
			return usagef("%v", err)
		}
		v, err := c.Result(ctx, conv)
		if err != nil {
			return err
		}
		cx, err := c.Context(ctx, conv)
		if err != nil {
			return err
		}
		return writeJSON(std.out, map[string]any{
			"conversation": conv, "context_tokens": cx.Tokens, "context_messages": len(cx.Messages),
			"skipped": cx.Skipped, "value": v,
		})
	}
	st, err := jetstream.Open(ctx, nc, env.jetstream())
	if err != nil {
		return err
	}
	return writeJSON(std.out, st.Status(ctx))
}

func writeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/jetstream/embedded"
	"github.com/compactor/compactor/summarizer"
	"github.com/compactor/compactor/summarizer/extractive"
	"github.com/compactor/compactor/summarizer/llm"
	"github.com/compactor/compactor/summarizer/pretrim"
	"github.com/compactor/compactor/triggers"
)

func parseLevel(s string) (zerolog.Level, error) {
	l, err := zerolog.ParseLevel(s)
	if err != nil || s == "" {
		return 0, fmt.Errorf("unknown log level %q (trace, debug, info, warn, error)", s)
	}
	return l, nil
}

func newLogger(env Env, w io.Writer) zerolog.Logger {
	lvl, _ := parseLevel(env.LogLevel)
	if env.LogFormat == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339}
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger()
}

// component is anything serve runs: it returns when ctx is done and its work drained.
type component interface {
	Run(ctx context.Context) error
}

// serve runs the roles until ctx is done, then drains them within DrainTimeout.
func serve(ctx context.Context, env Env, std stdio) error {
	log := newLogger(env, std.err)
	url := env.NATSURL
	if url == "" {
		srv, err := embedded.Start(embedded.Config{Listen: env.Listen, DataDir: env.DataDir, Logger: log})
		if err != nil {
			return err
		}
		defer srv.Shutdown()
		url = srv.ClientURL()
		log.Info().Str("url", url).Str("data_dir", env.DataDir).Msg("embedded NATS server started")
	}
	nc, err := jetstream.Connect(url, "compactor", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	st, err := jetstream.Provision(ctx, nc, env.jetstream())
	if err != nil {
		return err
	}
	comps, err := build(env, st, log)
	if err != nil {
		return err
	}
	// Components stop taking work when ctx is done; their in-flight jobs finish on
	// their own. The group's context only stops the others when one fails.
	g, gctx := errgroup.WithContext(ctx)
	for _, c := range comps {
		g.Go(func() error { return c.Run(gctx) })
	}
	done := make(chan error, 1)
	go func() { done <- g.Wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	log.Info().Dur("drain_timeout", env.DrainTimeout).Msg("shutting down; draining in-flight work")
	select {
	case err := <-done:
		if err != nil {
			return err
		}
		log.Info().Msg("stopped")
		return nil
	case <-time.After(env.DrainTimeout):
		return fmt.Errorf("in-flight work did not drain within %s (COMPACTOR_DRAIN_TIMEOUT); unacked requests will be redelivered", env.DrainTimeout)
	}
}

// build wires the roles of this process.
func build(env Env, st *jetstream.Store, log zerolog.Logger) ([]component, error) {
	roles, _ := env.roles()
	var comps []component
	if roles.trigger {
		t, err := triggers.NewBudget(env.triggers(), st, log)
		if err != nil {
			return nil, err
		}
		comps = append(comps, t)
	}
	if roles.worker {
		fallback := extractive.New()
		opts := summarizer.Options{Summarizer: fallback, Fallback: fallback, PreTrim: pretrim.ToolOutputs, Logger: log}
		if env.usesLLM() {
			baseURL := env.LLMBaseURL
			if baseURL == "" {
				baseURL = "https://api.openai.com/v1"
			}
			s, err := llm.New(llm.Config{BaseURL: baseURL, APIKey: env.LLMAPIKey, Model: env.LLMModel, Timeout: env.LLMTimeout})
			if err != nil {
				return nil, fmt.Errorf("configuration: COMPACTOR_LLM_BASE_URL/COMPACTOR_LLM_MODEL: %w", err)
			}
			opts.Summarizer = s
			opts.Retryable = llm.Retryable
			log.Info().Str("llm_base_url", redactURL(baseURL)).Str("model", env.LLMModel).Msg("summaries by LLM")
		} else {
			log.Warn().Msg("no COMPACTOR_LLM_BASE_URL or API key: summaries are extractive (no LLM), marked fallback")
		}
		p, err := summarizer.NewPool(env.summarizer(), st, opts)
		if err != nil {
			return nil, err
		}
		comps = append(comps, p)
	}
	return comps, nil
}

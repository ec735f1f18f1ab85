package telemetry

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/compactor/compactor/schemas/policy"
	"github.com/compactor/compactor/summarizer/llm"
	"github.com/compactor/compactor/summarizer/summary"
)

// TracesEndpoint is where spans go, and whether traces are on: COMPACTOR_OTEL_ENDPOINT
// (as url), or else the standard OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
// OTEL_EXPORTER_OTLP_ENDPOINT (url "", the exporter reads them itself, with the other
// OTEL_EXPORTER_OTLP_* variables). OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none
// turn traces off whatever is set.
func TracesEndpoint(otelEndpoint string, lookup func(string) (string, bool)) (on bool, url string) {
	get := func(k string) string {
		if lookup == nil {
			return ""
		}
		v, _ := lookup(k)
		return strings.TrimSpace(v)
	}
	if strings.EqualFold(get("OTEL_SDK_DISABLED"), "true") || strings.EqualFold(get("OTEL_TRACES_EXPORTER"), "none") {
		return false, ""
	}
	if otelEndpoint != "" {
		return true, otlpTracesURL(otelEndpoint)
	}
	return get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || get("OTEL_EXPORTER_OTLP_ENDPOINT") != "", ""
}

// otlpTracesURL is the traces URL of an OTLP/HTTP endpoint: a URL without a path gets
// /v1/traces, as OTEL_EXPORTER_OTLP_ENDPOINT does; one with a path is used as it is.
func otlpTracesURL(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Path != "" && u.Path != "/") {
		return endpoint
	}
	u.Path = "/v1/traces"
	return u.String()
}

// CheckOTelEndpoint checks COMPACTOR_OTEL_ENDPOINT: an http or https URL with a host.
func CheckOTelEndpoint(endpoint string) error {
	u, err := url.Parse(endpoint)
	if err != nil {
		return err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an http:// or https:// URL with a host (e.g. http://otel-collector:4318)", policy.RedactURL(endpoint))
	}
	return nil
}

// NewTracing returns the tracer provider of otelEndpoint and the OTEL_ variables lookup
// finds (see TracesEndpoint): spans batched and exported over
// OTLP/HTTP, service.name compactor (OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
// override it), sampled as OTEL_TRACES_SAMPLER says (default: every trace, or as the
// parent said). Nil when traces are off. Shutdown flushes what is batched.
//
// ids, when not nil, hashes the conversation ids of every span exported (see IDHasher).
func NewTracing(ctx context.Context, otelEndpoint string, lookup func(string) (string, bool), version string, ids ...*IDHasher) (*sdktrace.TracerProvider, error) {
	on, endpoint := TracesEndpoint(otelEndpoint, lookup)
	if !on {
		return nil, nil
	}
	var opts []otlptracehttp.Option
	if endpoint != "" {
		opts = append(opts, otlptracehttp.WithEndpointURL(endpoint))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "compactor"), attribute.String("service.version", version)),
		resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost(), resource.WithProcessPID())
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	var out sdktrace.SpanExporter = exp
	for _, h := range ids {
		out = h.Exporter(out)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(out), sdktrace.WithResource(res)), nil
}

// ErrorHandler logs what the OpenTelemetry SDK reports (a collector that refuses or is
// away, every batch) as the process's own log lines, at most one each interval, with
// how many were left out; the SDK's default prints plain text to stderr.
func ErrorHandler(log zerolog.Logger, interval time.Duration) otel.ErrorHandler {
	var (
		mu      sync.Mutex
		last    time.Time
		dropped int
	)
	return otel.ErrorHandlerFunc(func(err error) {
		mu.Lock()
		now := time.Now()
		if !last.IsZero() && now.Sub(last) < interval {
			dropped++
			mu.Unlock()
			return
		}
		n := dropped
		last, dropped = now, 0
		mu.Unlock()
		log.Warn().Err(err).Int("left_out", n).Msg("traces: OpenTelemetry error (spans may be lost)")
	})
}

// ShutdownTracing flushes the spans batched, for at most a few seconds: a collector
// that is away does not hold the exit back.
func ShutdownTracing(tp *sdktrace.TracerProvider, within time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	return tp.Shutdown(ctx)
}

// llmSpan starts the span of one LLM call, with the OpenTelemetry gen_ai semantic
// conventions: the API is OpenAI's chat completions (whatever server speaks it).
func llmSpan(ctx context.Context, tr trace.Tracer, s *llm.Summarizer, in summary.Input) (context.Context, trace.Span) {
	cfg := s.Config()
	attrs := []attribute.KeyValue{
		attribute.String("gen_ai.operation.name", "chat"),
		attribute.String("gen_ai.system", "openai"),
		attribute.String("gen_ai.provider.name", "openai"),
		attribute.String("gen_ai.request.model", cfg.Model),
		attribute.Int("gen_ai.request.max_tokens", in.MaxSummaryTokens),
	}
	if u, err := url.Parse(cfg.BaseURL); err == nil && u.Host != "" {
		host, port, err := net.SplitHostPort(u.Host)
		if err != nil {
			host, port = u.Host, map[string]string{"http": "80", "https": "443"}[u.Scheme]
		}
		attrs = append(attrs, attribute.String("server.address", host))
		if p, err := strconv.Atoi(port); err == nil {
			attrs = append(attrs, attribute.Int("server.port", p))
		}
	}
	return tr.Start(ctx, "chat "+cfg.Model, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

// endLLMSpan ends an LLM call's span with what the endpoint answered: the model that
// answered and the tokens it reported, or the kind of failure.
func endLLMSpan(span trace.Span, out summary.Output, err error) {
	if err != nil {
		kind := llm.ErrorKind(err)
		span.SetAttributes(attribute.String("error.type", kind))
		// Not the error's text: it may quote what the model answered (a refusal, a
		// response body), and spans never carry content.
		span.SetStatus(codes.Error, kind)
	} else {
		span.SetAttributes(attribute.String("gen_ai.response.model", out.Model))
		if u := out.Usage; u != nil {
			span.SetAttributes(attribute.Int("gen_ai.usage.input_tokens", u.PromptTokens),
				attribute.Int("gen_ai.usage.output_tokens", u.CompletionTokens))
		}
	}
	span.End()
}

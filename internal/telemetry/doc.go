// Package telemetry is what a Compactor node tells its operators: Prometheus metrics
// (on a registry of their own, label values from closed sets and the operator's
// configuration only), OpenTelemetry traces over OTLP/HTTP, and the operators' HTTP
// listener with /healthz, /readyz, /metrics and /debug/pprof/.
//
// The summarizer and the triggers report through their Observer interfaces and import
// nothing of Prometheus; [Telemetry] plugs [Metrics] and a tracer provider into their
// configurations and wraps the LLM summarizer so every call is measured and traced.
package telemetry

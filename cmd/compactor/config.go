package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"reflect"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kelseyhightower/envconfig"

	"github.com/compactor/compactor/internal/natsconn"
	"github.com/compactor/compactor/internal/node"
	"github.com/compactor/compactor/internal/proxy"
	"github.com/compactor/compactor/internal/savings"
	"github.com/compactor/compactor/internal/telemetry"
	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/schemas/policy"
)

// envPrefix starts every variable Compactor reads.
const envPrefix = "COMPACTOR"

// Env is the process's configuration: the COMPACTOR_ variables of the process itself
// (envconfig) and the environment tier of the policy keys (Policy, one variable per
// key of policy.Keys). Only cmd reads the environment.
type Env struct {
	NATSURL  string `envconfig:"NATS_URL" desc:"NATS server URL(s), comma separated; empty: serve runs an embedded server, the other commands take NATS_URL or a nats CLI context, else COMPACTOR_LISTEN"`
	Listen   string `envconfig:"LISTEN" default:"127.0.0.1:4222" desc:"host:port the embedded NATS server listens on"`
	DataDir  string `envconfig:"DATA_DIR" default:"compactor-data" desc:"where the embedded NATS server stores JetStream data"`
	Roles    string `envconfig:"ROLES" default:"trigger,worker,api" desc:"roles serve runs, comma-separated: trigger, worker, api (the compactor service)"`
	Replicas int    `envconfig:"REPLICAS" default:"1" desc:"replicas of every stream and bucket (3 in a cluster)"`
	Config   string `envconfig:"CONFIG" desc:"JSON file of named profiles (see docs/policy.md); empty: none"`

	// How the connections to an external NATS authenticate and use TLS (natsconn.Auth).
	NATSCreds    string `envconfig:"NATS_CREDS" desc:"NATS credentials file (user JWT and NKey seed, as nsc writes it); one way to authenticate, like COMPACTOR_NATS_NKEY, COMPACTOR_NATS_TOKEN, COMPACTOR_NATS_USER or user info in the URL"`
	NATSNKey     string `envconfig:"NATS_NKEY" desc:"file holding a NATS user NKey seed (SU...); the seed is never logged"`
	NATSToken    string `envconfig:"NATS_TOKEN" desc:"NATS authentication token; never logged"`
	NATSUser     string `envconfig:"NATS_USER" desc:"NATS user name, with COMPACTOR_NATS_PASSWORD (or nats://user:password@host in the URL)"`
	NATSPassword string `envconfig:"NATS_PASSWORD" desc:"password of COMPACTOR_NATS_USER; never logged"`
	NATSCA       string `envconfig:"NATS_CA" desc:"PEM file of the CA(s) that signed the NATS server's certificate (default: the system's roots); implies TLS, like a tls:// URL"`
	NATSCert     string `envconfig:"NATS_CERT" desc:"PEM client certificate for a NATS server that verifies clients, with COMPACTOR_NATS_KEY; implies TLS"`
	NATSKey      string `envconfig:"NATS_KEY" desc:"PEM private key of COMPACTOR_NATS_CERT"`
	NATSInbox    string `envconfig:"NATS_INBOX_PREFIX" desc:"prefix of this process's reply subjects instead of _INBOX, e.g. _INBOX_worker; with a server that lets each user subscribe only to its own prefix (deploy/nats/accounts.conf), no user reads the replies of another"`
	NATSMonitor  string `envconfig:"NATS_MONITOR_URL" desc:"the NATS servers' monitoring URLs (http_port), comma separated, e.g. http://nats-1:8222,http://nats-2:8222: where serve, its roles and compactor status read whether the servers sync every write to disk (sync_interval); empty: asked of the system account, which only its users may read, else reported as unknown"`
	ViaService   bool   `envconfig:"VIA_SERVICE" default:"false" desc:"publish, context, recall, compact, status <conv> and forget: open no stream, and go through the compactor service (compactor.context, recall, status, compact, forget) and a JetStream publish on chat.<conv>.msg: the mode of a tenant's user, who may not use $JS.API; chosen by itself, said on stderr, when the streams cannot be looked up for want of permission or of JetStream"`

	Workers        int           `envconfig:"WORKERS" default:"4" desc:"summarizer jobs this process runs at once"`
	MaxAttempts    int           `envconfig:"MAX_ATTEMPTS" default:"5" desc:"deliveries of one request before it is dead-lettered"`
	BackoffBase    time.Duration `envconfig:"BACKOFF_BASE" default:"2s" desc:"delay before the second attempt of a failed compaction (doubles each attempt, ±25% jitter)"`
	BackoffMax     time.Duration `envconfig:"BACKOFF_MAX" default:"2m" desc:"longest delay between attempts"`
	RetryDelay     time.Duration `envconfig:"RETRY_DELAY" default:"5s" desc:"trigger: wait before asking again when a request is already pending"`
	LLMAPIKey      string        `envconfig:"LLM_API_KEY" desc:"the summarizer's API key (falls back to OPENAI_API_KEY); never logged"`
	ChatMaxAge     time.Duration `envconfig:"CHAT_MAX_AGE" default:"0" desc:"how long CHAT keeps raw history; 0 = forever (applied to an existing CHAT only with COMPACTOR_UPDATE_STREAMS)"`
	MaxObject      int64         `envconfig:"MAX_OBJECT_SIZE" default:"16777216" desc:"bytes: the largest object a message over the NATS max payload is stored as (its content, reasoning, extra); larger ones are refused by publish and not fetched by readers and workers"`
	DrainTimeout   time.Duration `envconfig:"DRAIN_TIMEOUT" default:"3m" desc:"on SIGINT/SIGTERM, how long in-flight work may take to finish; what is unfinished then is handed back to the queue"`
	LedgerMaxAge   time.Duration `envconfig:"LEDGER_MAX_AGE" default:"9600h" desc:"how long the savings ledger (LEDGER, the proxy's exchanges) keeps an entry, at least 1h (applied to an existing LEDGER only with COMPACTOR_UPDATE_STREAMS)"`
	LedgerMaxBytes int64         `envconfig:"LEDGER_MAX_BYTES" default:"1073741824" desc:"bytes: the most the savings ledger holds, oldest entries dropped first, at least 1048576 (applied to an existing LEDGER only with COMPACTOR_UPDATE_STREAMS)"`
	ForgetTTL      time.Duration `envconfig:"FORGET_TTL" default:"24h" desc:"how long the tombstone of a forgotten conversation is kept: longer than any compaction can be in flight (summarizer calls, retries, backoffs), so a late write of it is recognised and taken back (applied to an existing bucket only with COMPACTOR_UPDATE_STREAMS)"`
	AckWait        time.Duration `envconfig:"WORKER_ACK_WAIT" default:"6s" desc:"how long a request may go without a worker's heartbeat before it is delivered again (what a crashed or frozen worker costs); heartbeats go every third of it, at least every 2s (applied to an existing consumer only with COMPACTOR_UPDATE_STREAMS)"`
	// The trigger's partitions (docs/operations.md, "Scaling the trigger").
	TriggerPartitions int           `envconfig:"TRIGGER_PARTITIONS" default:"1" desc:"how many partitions the trigger's work is split into, shared out among the trigger processes (1 to 256); 1 is one active trigger process and standbys. Every process must use the same count: change it with COMPACTOR_UPDATE_STREAMS on one process, then roll the others"`
	TriggerHeartbeat  time.Duration `envconfig:"TRIGGER_HEARTBEAT" default:"2s" desc:"with several trigger partitions: how often a trigger process announces itself; one silent for 3 heartbeats loses its partitions (the bucket's TTL: the same in every process)"`
	HTTPListen        string        `envconfig:"HTTP_LISTEN" desc:"serve: host:port of an HTTP listener for operators with /healthz (liveness), /readyz (NATS and JetStream), /metrics (Prometheus) and /debug/pprof/ (profiles of this process); empty: off. Bind it to localhost or a private network only"`
	OTelEndpoint      string        `envconfig:"OTEL_ENDPOINT" desc:"serve: OTLP/HTTP endpoint traces are sent to, e.g. http://otel-collector:4318 (/v1/traces is added to a URL without a path); empty: the standard OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT, and no traces when neither is set"`
	LogLevel          string        `envconfig:"LOG_LEVEL" default:"info" desc:"trace, debug, info, warn or error"`
	LogFormat         string        `envconfig:"LOG_FORMAT" default:"json" desc:"json (one line per event) or console"`
	LogHashIDs        bool          `envconfig:"LOG_HASH_IDS" default:"false" desc:"replace conversation ids in logs and exported spans with a keyed hash of them (HMAC-SHA-256 under COMPACTOR_LOG_HASH_KEY): a forget cannot reach logs and traces. Give every process of a deployment the same key, so a conversation has one hash everywhere"`
	LogHashKey        string        `envconfig:"LOG_HASH_KEY" desc:"with COMPACTOR_LOG_HASH_IDS: the secret key of the hash, at least 16 bytes; keep it out of the logs"`

	// Tenants (internal/tenants, docs/tenants.md).
	TenantsFile string `envconfig:"TENANTS_FILE" desc:"serve: JSON file of the tenants this deployment serves, each in a NATS account of its own, with its policy defaults, profiles and quotas (docs/tenants.md); serve runs its roles once per tenant on the tenant's own streams and reads the file again when it changes (a tenant added or removed leaves the others running); empty: no tenants, the deployment's own streams"`
	// Prices is compactor savings' price table (internal/savings, docs/savings.md).
	Prices string `envconfig:"PRICES" desc:"savings: JSON file of the price table (US dollars per million tokens, per model: input, cached_input, cache_write, output) compactor savings and the web view's savings page price exchanges with (docs/savings.md; examples/prices.json); empty: tokens only (also savings --prices)"`
	Tenant string `envconfig:"TENANT" desc:"the other commands, run in Compactor's own account: act on this tenant's conversations (its streams and service subjects), e.g. COMPACTOR_TENANT=acme compactor status; empty: the deployment's own. A tenant's own users need not set it: their account's imports name their tenant"`

	// UpdateStreams applies this process's settings to existing streams, buckets and
	// consumers (also serve --update-streams).
	UpdateStreams bool `envconfig:"UPDATE_STREAMS" default:"false" desc:"serve: change existing streams, buckets and consumers whose settings differ from this process's (e.g. COMPACTOR_CHAT_MAX_AGE, COMPACTOR_REPLICAS); false: leave them and refuse to start, naming each difference (same as serve --update-streams)"`

	// Policy is the environment tier of the policy keys: COMPACTOR_<KEY> by key.
	Policy policy.Layer `ignored:"true"`
	// Profiles is the parsed COMPACTOR_CONFIG file (nil: none).
	Profiles *policy.File `ignored:"true"`

	lookup   func(string) (string, bool)
	counters *node.Counters
	// viewPrices is the parsed COMPACTOR_PRICES of a process serving the web view
	// (nil: none, or no view).
	viewPrices *savings.Prices

	// The compactor service (the api role).
	APIConcurrency int `envconfig:"API_CONCURRENCY" default:"16" desc:"serve, api role: how many requests each endpoint of the compactor service serves at once in this process; one more is answered Busy (503) at once"`

	// compactor mcp (internal/mcpserver, docs/mcp.md); its flags win over them.
	MCPConversation    string `envconfig:"MCP_CONVERSATION" desc:"mcp: the conversation the tools read (--conversation)"`
	MCPAnyConversation bool   `envconfig:"MCP_ANY_CONVERSATION" default:"false" desc:"mcp: let a tool call name any conversation the NATS user may read (--any-conversation)"`
	MCPListen          string `envconfig:"MCP_LISTEN" desc:"mcp: host:port to serve streamable HTTP on instead of stdio (--listen)"`
	MCPToken           string `envconfig:"MCP_TOKEN" desc:"mcp: the bearer token (at least 16 characters) every HTTP request must send; required on any address but loopback; never logged"`
	MCPMaxTokens       int    `envconfig:"MCP_MAX_TOKENS" default:"0" desc:"mcp: the most tokens one recall returns (0: 8000; --max-tokens)"`
	MCPAllowPin        bool   `envconfig:"MCP_ALLOW_PIN" default:"false" desc:"mcp: list the pin tool, which adds a message to its conversation's pins policy key (--allow-pin); otherwise the server is read-only"`

	// The web view for people (internal/node/view.go, docs/view.md).
	ViewListen string `envconfig:"VIEW_LISTEN" desc:"serve, api role: host:port of the read-only web view (conversations, token gauges, compaction timelines, summaries and tails); empty: off. It shows conversation content: set COMPACTOR_VIEW_TOKEN, which is required on any address but loopback"`
	ViewToken  string `envconfig:"VIEW_TOKEN" desc:"the web view's credential (at least 16 characters), sent as a bearer token or as the basic-auth password; never logged. Empty: the view answers only requests to localhost"`

	// The proxy role (internal/proxy, docs/proxy.md).
	ProxyListen                string        `envconfig:"PROXY_LISTEN" desc:"host:port of the proxy an agent calls instead of its model (OpenAI Chat Completions and Responses, Anthropic Messages and Gemini rewritten with the compacted context; every other path passed through); serve runs the proxy role when it is set; compactor proxy: default 127.0.0.1:8088"`
	ProxyUpstream              string        `envconfig:"PROXY_UPSTREAM" default:"https://api.openai.com" desc:"proxy: the OpenAI-compatible base URL requests go to (the request path is appended: /v1/chat/completions -> <upstream>/v1/chat/completions)"`
	ProxyAnthropicUpstream     string        `envconfig:"PROXY_ANTHROPIC_UPSTREAM" default:"https://api.anthropic.com" desc:"proxy: the base URL every path under /v1/messages goes to"`
	ProxyUpstreamKey           string        `envconfig:"PROXY_UPSTREAM_KEY" desc:"proxy: the operator's key for COMPACTOR_PROXY_UPSTREAM, sent in place of the client's Authorization; empty: the client's own; never logged"`
	ProxyAnthropicKey          string        `envconfig:"PROXY_ANTHROPIC_UPSTREAM_KEY" desc:"proxy: the operator's key for COMPACTOR_PROXY_ANTHROPIC_UPSTREAM, sent in place of the client's x-api-key; empty: the client's own; never logged"`
	ProxyGeminiUpstream        string        `envconfig:"PROXY_GEMINI_UPSTREAM" default:"https://generativelanguage.googleapis.com" desc:"proxy: the base URL every Gemini path (/v1beta/..., /v1/models/<model>:<method>) goes to"`
	ProxyGeminiKey             string        `envconfig:"PROXY_GEMINI_UPSTREAM_KEY" desc:"proxy: the operator's key for COMPACTOR_PROXY_GEMINI_UPSTREAM, sent as x-goog-api-key in place of the client's x-goog-api-key or ?key=; empty: the client's own; never logged"`
	ProxySessionHeaders        string        `envconfig:"PROXY_SESSION_HEADERS" default:"X-Claude-Code-Session-Id,session-id,thread-id,x-session-id,x-opencode-session" desc:"proxy: headers naming the conversation when X-Compactor-Conversation is absent, looked at in order, comma separated (a value that is not a valid id becomes s- and 32 hex digits of its SHA-256)"`
	ProxyBodyField             string        `envconfig:"PROXY_BODY_FIELD" desc:"proxy: dotted path of a string field of the request body naming the conversation when no header does, e.g. metadata.user_id; empty: none"`
	ProxyRequireID             bool          `envconfig:"PROXY_REQUIRE_ID" default:"false" desc:"proxy: refuse (400) a request that names no conversation; false: pass it through untouched, marked X-Compactor-Passthrough: no-conversation-id"`
	ProxyMode                  string        `envconfig:"PROXY_MODE" default:"rewrite" desc:"proxy: rewrite (the model is sent the compacted context) or shadow (every request goes upstream exactly as the client sent it, while the conversation is stored and compacted and the savings ledger books what rewrite would have sent; read it with compactor savings)"`
	ProxyOnNATSDown            string        `envconfig:"PROXY_ON_NATS_DOWN" default:"fail" desc:"proxy: with NATS unreachable, fail (503) or pass (the request forwarded as sent, marked X-Compactor-Passthrough: nats-unavailable)"`
	ProxyWait                  time.Duration `envconfig:"PROXY_WAIT" default:"10s" desc:"proxy: how long a request over the window waits for a pending compaction before its context is cut at read time"`
	ProxyCacheTTL              time.Duration `envconfig:"PROXY_CACHE_TTL" default:"5m" desc:"proxy: how long the provider's prompt cache is taken to live: a newer compaction is swapped in only past it, or when the window needs it"`
	ProxyMaxBody               int64         `envconfig:"PROXY_MAX_BODY" default:"33554432" desc:"proxy: bytes: the largest request body of the rewritten paths (413 over it)"`
	ProxyBindOwner             bool          `envconfig:"PROXY_BIND_OWNER" default:"true" desc:"proxy: bind each conversation to the credential that first wrote it (another credential gets 403); false for clients whose credential changes during a conversation (OAuth access tokens that refresh): then authenticate in front of the proxy"`
	ProxyAnswerCompactions     bool          `envconfig:"PROXY_ANSWER_COMPACTIONS" default:"true" desc:"proxy: answer an agent's request to summarize its own conversation (Claude Code's /compact, Codex's checkpoint, Gemini CLI's compression, OpenCode's) from Compactor's summary when one covers it, without calling the model; false: forward them"`
	ProxyCompactionPrompts     string        `envconfig:"PROXY_COMPACTION_PROMPTS" desc:"proxy: more texts, separated by ;, whose presence in a request's last user message makes it an agent's compaction request (the built-in ones are Claude Code's, Codex's, Gemini CLI's and OpenCode's)"`
	ProxyMaxInFlight           int           `envconfig:"PROXY_MAX_IN_FLIGHT" default:"128" desc:"proxy: the most requests served at once (each may hold COMPACTOR_PROXY_MAX_BODY and a 64 MiB reply); one more is answered 503 with Retry-After at once"`
	ProxyReadHeaderTimeout     time.Duration `envconfig:"PROXY_READ_HEADER_TIMEOUT" default:"10s" desc:"proxy: how long a client may take to send a request's headers (the connection is closed past it)"`
	ProxyReadTimeout           time.Duration `envconfig:"PROXY_READ_TIMEOUT" default:"2m" desc:"proxy: how long a client may take to send a request's body (408 past it)"`
	ProxyUpstreamHeaderTimeout time.Duration `envconfig:"PROXY_UPSTREAM_HEADER_TIMEOUT" default:"10m" desc:"proxy: how long the upstream may take to send its response headers (504 past it; a whole reply from a reasoning model comes only when done)"`
	ProxyUpstreamIdleTimeout   time.Duration `envconfig:"PROXY_UPSTREAM_IDLE_TIMEOUT" default:"5m" desc:"proxy: how long the upstream's response may go without a byte (a stream that stalls past it ends with the API's error event; nothing is stored)"`
	ProxyOwnerKey              string        `envconfig:"PROXY_OWNER_KEY" desc:"proxy: key of the HMAC-SHA-256 digest that binds a conversation to the credential that wrote it; empty: SHA-256 with a domain prefix. Keep it secret and the same on every proxy process"`
}

// loadEnv reads and checks every variable; an error names the variable at fault.
func loadEnv(lookup func(string) (string, bool)) (Env, error) {
	e, err := readEnv(lookup)
	if err != nil {
		return e, err
	}
	return e, e.validate()
}

// loadClientEnv is loadEnv for the commands that resolve their connection with flags
// and the nats CLI's sources (resolveConnection), which check the connection variables
// together with them.
func loadClientEnv(lookup func(string) (string, bool)) (Env, error) {
	e, err := readEnv(lookup)
	if err != nil {
		return e, err
	}
	return e, e.validateSettings()
}

// readEnv reads every variable; a value of the wrong type is named with what it should
// look like.
func readEnv(lookup func(string) (string, bool)) (Env, error) {
	var e Env
	if err := readVariables(&e, lookup); err != nil {
		return e, err
	}
	e.lookup = lookup
	e.counters = node.NewCounters()
	e.Policy = policy.Layer{}
	for _, k := range policy.Keys {
		if v, ok := lookup(k.Env()); ok && v != "" {
			e.Policy[k.Name] = v
		}
	}
	if e.Policy["llm_base_url"] == "" {
		if v, ok := lookup("OPENAI_BASE_URL"); ok && v != "" {
			e.Policy["llm_base_url"] = v
		}
	}
	if e.Config != "" {
		data, err := os.ReadFile(e.Config)
		if err != nil {
			return e, fmt.Errorf("configuration: COMPACTOR_CONFIG: %w", err)
		}
		if e.Profiles, err = policy.ParseFile(data); err != nil {
			return e, fmt.Errorf("configuration: COMPACTOR_CONFIG %s: %w", e.Config, err)
		}
	}
	if e.Prices != "" && e.ViewListen != "" {
		var err error
		if e.viewPrices, err = savings.ReadPrices(e.Prices); err != nil {
			return e, fmt.Errorf("configuration: COMPACTOR_PRICES: %w", err)
		}
	}
	return e, nil
}

// readVariables sets each field of e with an envconfig tag from COMPACTOR_<tag>, or its
// default. Not envconfig.Process: it also reads the bare name when the prefixed one is
// unset (NATS_URL for COMPACTOR_NATS_URL, LOG_LEVEL, WORKERS, ...), so variables meant
// for other programs, the nats CLI's above all, configured Compactor.
func readVariables(e *Env, lookup func(string) (string, bool)) error {
	v := reflect.ValueOf(e).Elem()
	for i := range v.NumField() {
		f := v.Type().Field(i)
		tag := f.Tag.Get("envconfig")
		if tag == "" || f.Tag.Get("ignored") == "true" {
			continue
		}
		key := envPrefix + "_" + tag
		value, ok := lookup(key)
		if !ok || value == "" { // set but empty is unset, as for the policy keys
			if value, ok = f.Tag.Lookup("default"); !ok {
				continue
			}
		}
		field := v.Field(i)
		var err error
		switch {
		case f.Type == reflect.TypeOf(time.Duration(0)):
			var d time.Duration
			if d, err = time.ParseDuration(value); err == nil {
				field.SetInt(int64(d))
			}
		case field.Kind() == reflect.String:
			field.SetString(value)
		case field.Kind() == reflect.Int, field.Kind() == reflect.Int64:
			var n int64
			if n, err = strconv.ParseInt(strings.TrimSpace(value), 10, 64); err == nil {
				field.SetInt(n)
			}
		case field.Kind() == reflect.Bool:
			var b bool
			if b, err = strconv.ParseBool(strings.TrimSpace(value)); err == nil {
				field.SetBool(b)
			}
		default:
			return fmt.Errorf("configuration: %s: field %s of type %s cannot be read", key, f.Name, f.Type)
		}
		if err != nil {
			return fmt.Errorf("configuration: %s is %q: %s", key, value, wantOfType(f.Type.String()))
		}
	}
	return nil
}

// wantOfType says what a value of a variable of type typ looks like.
func wantOfType(typ string) string {
	switch typ {
	case "time.Duration":
		return "want a duration with its unit, e.g. 30s, 2m or 1h30m"
	case "bool":
		return "want true or false"
	case "int", "int64":
		return "want a whole number"
	}
	return "want a value of type " + typ
}

func bad(name, format string, args ...any) error {
	return fmt.Errorf("configuration: %s_%s %s", envPrefix, name, fmt.Sprintf(format, args...))
}

func (e Env) validate() error {
	if err := e.validateSettings(); err != nil {
		return err
	}
	return e.validateAuth()
}

// validateSettings checks every variable but the NATS connection's.
func (e Env) validateSettings() error {
	if _, err := e.roles(); err != nil {
		return err
	}
	checks := []struct {
		ok   bool
		name string
		msg  string
	}{
		{e.Replicas >= 1 && e.Replicas <= 5, "REPLICAS", "must be 1 to 5"},
		{e.Workers >= 1, "WORKERS", "must be at least 1"},
		{e.MaxAttempts >= 1, "MAX_ATTEMPTS", "must be at least 1"},
		{e.RetryDelay > 0, "RETRY_DELAY", "must be positive"},
		{e.BackoffBase > 0, "BACKOFF_BASE", "must be positive"},
		{e.BackoffMax >= e.BackoffBase, "BACKOFF_MAX", "must be at least COMPACTOR_BACKOFF_BASE"},
		{e.ChatMaxAge >= 0, "CHAT_MAX_AGE", "must not be negative"},
		{e.ChatMaxAge == 0 || e.ChatMaxAge >= jetstream.DefaultConfig().DuplicateWindow, "CHAT_MAX_AGE",
			"must be 0 (forever) or at least the duplicate window of " + jetstream.DefaultConfig().DuplicateWindow.String()},
		{e.MaxObject >= 1<<10 && e.MaxObject <= 1<<30, "MAX_OBJECT_SIZE", "must be 1024 to 1073741824 bytes"},
		{e.DrainTimeout > 0, "DRAIN_TIMEOUT", "must be positive"},
		{e.APIConcurrency >= 1 && e.APIConcurrency <= 4096, "API_CONCURRENCY", "must be 1 to 4096"},
		{e.AckWait >= 3*time.Second, "WORKER_ACK_WAIT", "must be at least 3s (heartbeats go every third of it)"},
		{e.LedgerMaxAge >= time.Hour, "LEDGER_MAX_AGE", "must be at least 1h"},
		{e.LedgerMaxBytes >= 1<<20, "LEDGER_MAX_BYTES", "must be at least 1048576 bytes"},
		{e.ForgetTTL >= time.Minute, "FORGET_TTL", "must be at least 1m (tombstones must outlive the compactions in flight)"},
		{e.TriggerPartitions >= 1 && e.TriggerPartitions <= jetstream.MaxTriggerPartitions, "TRIGGER_PARTITIONS",
			fmt.Sprintf("must be 1 to %d", jetstream.MaxTriggerPartitions)},
		{e.TriggerHeartbeat >= 100*time.Millisecond, "TRIGGER_HEARTBEAT", "must be at least 100ms"},
		{e.LogFormat == "json" || e.LogFormat == "console", "LOG_FORMAT", "must be json or console"},
		{!e.LogHashIDs || len(e.LogHashKey) >= 16, "LOG_HASH_KEY", "must be at least 16 bytes with COMPACTOR_LOG_HASH_IDS=true"},
	}
	for _, c := range checks {
		if !c.ok {
			return bad(c.name, "%s", c.msg)
		}
	}
	if e.HTTPListen != "" {
		if _, _, err := net.SplitHostPort(e.HTTPListen); err != nil {
			return bad("HTTP_LISTEN", "must be host:port (e.g. 127.0.0.1:9090): %v", err)
		}
	}
	for _, u := range e.monitorURLs() {
		if err := jetstream.ValidateMonitorURL(u); err != nil {
			return bad("NATS_MONITOR_URL", "%v", err)
		}
	}
	if e.OTelEndpoint != "" {
		if err := telemetry.CheckOTelEndpoint(e.OTelEndpoint); err != nil {
			return bad("OTEL_ENDPOINT", "%v", err)
		}
	}
	if err := e.validateView(); err != nil {
		return err
	}
	if err := e.validateProxy(); err != nil {
		return err
	}
	if _, err := parseLevel(e.LogLevel); err != nil {
		return bad("LOG_LEVEL", "%v", err)
	}
	if e.Tenant != "" {
		if err := jetstream.ValidateTenant(e.Tenant); err != nil {
			return bad("TENANT", "%v", err)
		}
	}
	if _, err := e.resolver(); err != nil {
		return err
	}
	return nil
}

// authVars names the variable of each natsconn.Auth field.
var authVars = map[string]string{
	"URL": "NATS_URL", "CredsFile": "NATS_CREDS", "NKeyFile": "NATS_NKEY", "Token": "NATS_TOKEN",
	"User": "NATS_USER", "Password": "NATS_PASSWORD", "CAFile": "NATS_CA", "CertFile": "NATS_CERT", "KeyFile": "NATS_KEY",
	"InboxPrefix": "NATS_INBOX_PREFIX",
}

// monitorURLs are COMPACTOR_NATS_MONITOR_URL's URLs.
func (e Env) monitorURLs() []string {
	var out []string
	for _, u := range strings.Split(e.NATSMonitor, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// natsAuth is how every command's connection authenticates and uses TLS.
func (e Env) natsAuth() natsconn.Auth {
	return natsconn.Auth{
		CredsFile: e.NATSCreds, NKeyFile: e.NATSNKey, Token: e.NATSToken, User: e.NATSUser,
		Password: e.NATSPassword, CAFile: e.NATSCA, CertFile: e.NATSCert, KeyFile: e.NATSKey,
		InboxPrefix: e.NATSInbox,
	}
}

// validateAuth checks the NATS authentication and TLS variables together with
// COMPACTOR_NATS_URL. Errors name the variables, never their secret values.
func (e Env) validateAuth() error {
	a := e.natsAuth()
	if e.NATSURL == "" {
		// The embedded server (serve) and a local one (other commands) take no
		// authentication or TLS.
		for _, f := range []string{"CredsFile", "NKeyFile", "Token", "User", "Password", "CAFile", "CertFile", "KeyFile"} {
			if natsconn.Field(a, f) != "" {
				return bad(authVars[f], "is set but COMPACTOR_NATS_URL is empty: the embedded NATS server takes no authentication or TLS; set COMPACTOR_NATS_URL to the secured server")
			}
		}
		return nil
	}
	var ae *natsconn.AuthError
	if err := a.Validate(e.NATSURL); errors.As(err, &ae) {
		return fmt.Errorf("configuration: %s", ae.Message(func(f string) string { return envPrefix + "_" + authVars[f] }))
	} else if err != nil {
		return fmt.Errorf("configuration: NATS authentication: %w", err)
	}
	return nil
}

// resolver builds the policy resolver of the environment and profiles. Errors in the
// environment tier name the variable.
func (e Env) resolver() (*policy.Resolver, error) {
	r, err := e.settings().Resolver()
	if err != nil {
		for _, k := range policy.Keys {
			if _, set := e.Policy[k.Name]; set && strings.Contains(err.Error(), "environment") && mentions(err.Error(), k.Name) {
				return nil, fmt.Errorf("configuration: %s: %w", k.Env(), err)
			}
		}
		return nil, fmt.Errorf("configuration: %w", err)
	}
	return r, nil
}

// mentions reports whether msg names key as a whole word.
func mentions(msg, key string) bool {
	for _, f := range strings.FieldsFunc(msg, func(r rune) bool { return !(r == '_' || r >= 'a' && r <= 'z') }) {
		if f == key {
			return true
		}
	}
	return false
}

func (e Env) roles() (node.Roles, error) {
	r, err := node.ParseRoles(e.Roles)
	if err != nil {
		return r, bad("ROLES", "%v", err)
	}
	return r, nil
}

// settings are the process's settings of env, as node.Settings.
func (e Env) settings() node.Settings {
	return node.Settings{
		Roles: e.Roles, Policy: e.Policy, Profiles: e.Profiles, Lookup: e.lookup,
		Workers: e.Workers, MaxAttempts: e.MaxAttempts, BackoffBase: e.BackoffBase, BackoffMax: e.BackoffMax,
		RetryDelay: e.RetryDelay, AckWait: e.AckWait, DrainTimeout: e.DrainTimeout,
		Replicas: e.Replicas, TriggerPartitions: e.TriggerPartitions, ChatMaxAge: e.ChatMaxAge, ForgetTTL: e.ForgetTTL,
		LedgerMaxAge: e.LedgerMaxAge, LedgerMaxBytes: e.LedgerMaxBytes,
		TriggerHeartbeat: e.TriggerHeartbeat, MaxObject: e.MaxObject, UpdateStreams: e.UpdateStreams,
		ViewListen: e.ViewListen, ViewToken: e.ViewToken, ViewPrices: e.viewPrices, APIConcurrency: e.APIConcurrency, Counters: e.counters, IDs: e.idHasher(),
		Proxy: e.proxy(),
	}
}

// proxy is the proxy role's configuration; nil when COMPACTOR_PROXY_LISTEN is empty.
func (e Env) proxy() *proxy.Config {
	if e.ProxyListen == "" {
		return nil
	}
	var headers []string
	for h := range strings.SplitSeq(e.ProxySessionHeaders, ",") {
		if h = strings.TrimSpace(h); h != "" {
			headers = append(headers, h)
		}
	}
	return &proxy.Config{
		Listen: e.ProxyListen, Upstream: e.ProxyUpstream, AnthropicUpstream: e.ProxyAnthropicUpstream, GeminiUpstream: e.ProxyGeminiUpstream,
		UpstreamKey: e.ProxyUpstreamKey, AnthropicUpstreamKey: e.ProxyAnthropicKey, GeminiUpstreamKey: e.ProxyGeminiKey,
		SessionHeaders: headers, BodyField: strings.TrimSpace(e.ProxyBodyField), RequireID: e.ProxyRequireID,
		Mode: strings.TrimSpace(e.ProxyMode), OnNATSDown: e.ProxyOnNATSDown, Wait: e.ProxyWait, CacheTTL: e.ProxyCacheTTL, MaxBody: e.ProxyMaxBody,
		OwnerKey: e.ProxyOwnerKey, BindOwner: e.ProxyBindOwner,
		MaxInFlight: e.ProxyMaxInFlight, ReadHeaderTimeout: e.ProxyReadHeaderTimeout, ReadTimeout: e.ProxyReadTimeout,
		UpstreamHeaderTimeout: e.ProxyUpstreamHeaderTimeout, UpstreamIdleTimeout: e.ProxyUpstreamIdleTimeout,
		AnswerCompactions: e.ProxyAnswerCompactions, CompactionPrompts: strings.Split(e.ProxyCompactionPrompts, ";"),
	}
}

// validateProxy checks the proxy's variables when the role runs.
func (e Env) validateProxy() error {
	c := e.proxy()
	if c == nil {
		return nil
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return bad("PROXY_LISTEN", "must be host:port (e.g. 127.0.0.1:8088): %v", err)
	}
	if err := c.Validate(); err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	return nil
}

// idHasher is the hasher of conversation ids in logs and spans; nil when
// COMPACTOR_LOG_HASH_IDS is off.
func (e Env) idHasher() *telemetry.IDHasher {
	if !e.LogHashIDs {
		return nil
	}
	return telemetry.NewIDHasher([]byte(e.LogHashKey))
}

// jetstream is the streams' configuration of env.
// With COMPACTOR_TENANT, it is that tenant's (checked by validateSettings).
func (e Env) jetstream() jetstream.Config {
	c := e.settings().JetStream()
	if e.Tenant != "" {
		if tc, err := c.ForTenant(e.Tenant); err == nil {
			return tc
		}
	}
	return c
}

// tenants is serve's tenants file; nil without COMPACTOR_TENANTS_FILE.
func (e Env) tenants() *node.TenantsSource {
	if e.TenantsFile == "" {
		return nil
	}
	return &node.TenantsSource{Path: e.TenantsFile}
}

// printEnvHelp lists every variable with its default.
func printEnvHelp(w io.Writer) error {
	var e Env
	tw := tabwriter.NewWriter(w, 2, 0, 2, ' ', 0)
	if err := envconfig.Usagef(envPrefix, &e, tw, "{{range .}}  {{usage_key .}}\t{{usage_default .}}\t{{usage_description .}}\n{{end}}"); err != nil {
		return err
	}
	fmt.Fprintf(tw, "\nPolicy keys (environment tier; profiles and, for safe keys, per-conversation policies may override):\n")
	for _, k := range policy.Keys {
		scope := ""
		if k.Scope == policy.Operator {
			scope = " (operator only)"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s%s\n", k.Env(), k.Default, k.Doc, scope)
	}
	fmt.Fprintf(tw, "  OPENAI_BASE_URL, OPENAI_API_KEY\t\tused when COMPACTOR_LLM_BASE_URL and the key are empty\n")
	fmt.Fprintf(tw, "\nThe nats CLI's settings (publish, context, compact, status, policy, forget; below the flags and COMPACTOR_NATS_*):\n")
	fmt.Fprintf(tw, "  NATS_URL, NATS_CREDS, NATS_NKEY, NATS_TOKEN,\t\t\n  NATS_USER, NATS_PASSWORD, NATS_CA, NATS_CERT,\t\t\n  NATS_KEY, NATS_INBOX_PREFIX\t\tas the nats CLI reads them\n")
	fmt.Fprintf(tw, "  NATS_CONTEXT\t\tthe nats CLI context to use (like --context); else the one `nats context select` chose\n")
	return tw.Flush()
}

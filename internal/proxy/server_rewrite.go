package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/compactor/compactor/internal/proxy/wire"
	"github.com/compactor/compactor/schemas"
)

// exchange is one request of a rewritten path on its way through the proxy.
type exchange struct {
	s    *Server
	w    http.ResponseWriter
	r    *http.Request
	wire Wire
	rt   httpRoute
	up   upstream
	span trace.Span

	start    time.Time
	upstream time.Duration // time spent waiting for and reading the upstream
	report   Report
	// side: the request is a side task of the agent's (sideRequest): its reply is
	// not stored.
	side bool
	// booked is the exchange's sent entry in the savings ledger, until its done entry
	// is booked (nil: none).
	booked *schemas.LedgerEntry
	// status is the upstream's HTTP status, once its answer came.
	status int
	// answered: Compactor answered the request itself (an agent's compaction request),
	// calling no model; wouldAnswer: in shadow mode, rewrite mode would have.
	answered, wouldAnswer bool
}

// rewrite serves one request of a rewritten path: the conversation named, the
// client's history stored, the compacted context sent upstream and the reply stored.
func (s *Server) rewrite(w http.ResponseWriter, r *http.Request, wire Wire, rt httpRoute) {
	// A client that sends a traceparent gets the request's span in its trace.
	ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := s.tracer.Start(ctx, "proxy "+wire.Name(), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("compactor.proxy.api", wire.Name())))
	x := &exchange{s: s, w: w, r: r.WithContext(ctx), wire: wire, rt: rt, up: s.ups[rt.upstream], span: span, start: time.Now(),
		report: Report{API: wire.Name(), Mode: s.cfg.Mode}}
	defer x.end()
	if s.cfg.Mode == ModeShadow {
		body, whole, err := readShadowBody(x.r, s.cfg.MaxBody)
		if err == nil && !whole {
			// Over the proxy's limit: forwarded as it comes, all of it, not read.
			x.passReader(io.MultiReader(bytes.NewReader(body), x.r.Body), "", PassShadowUnread)
			return
		}
		if errors.Is(err, errRequestTimeout) {
			x.refuse(http.StatusRequestTimeout, "invalid_request_error", "compactor proxy: the request body did not come within COMPACTOR_PROXY_READ_TIMEOUT")
			return
		}
		if err != nil {
			x.report.Outcome = OutcomeFailed
			return // the client went away while sending
		}
		x.shadowRequest(body)
		return
	}
	body, err := readBody(w, x.r, s.cfg.MaxBody)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			x.refuse(http.StatusRequestEntityTooLarge, "request_too_large", "the request body is over the proxy's limit (COMPACTOR_PROXY_MAX_BODY)")
			return
		}
		if errors.Is(err, errRequestTimeout) {
			x.refuse(http.StatusRequestTimeout, "invalid_request_error", "compactor proxy: the request body did not come within COMPACTOR_PROXY_READ_TIMEOUT")
			return
		}
		x.report.Outcome = OutcomeFailed
		return // the client went away while sending
	}
	id, err := identify(r.Header, body, s.cfg.SessionHeaders, s.cfg.BodyField)
	switch {
	case err != nil:
		x.refuse(http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	case id.conv == "" && s.cfg.RequireID:
		x.refuse(http.StatusBadRequest, "invalid_request_error", "bad request: no conversation named: send the header "+ConversationHeader+
			" (1-128 characters of [A-Za-z0-9_-]) or a session header ("+strings.Join(s.cfg.SessionHeaders, ", ")+")")
		return
	case id.conv == "":
		x.pass(body, "", PassNoConversation)
		return
	}
	span.SetAttributes(attribute.String(conversationAttribute, id.conv))
	if nc := s.opts.NATS; nc != nil && !nc.IsConnected() {
		x.natsDown(body, id.conv, nats.ErrDisconnected)
		return
	}
	x.compact(body, id.conv)
}

// shadow says the proxy runs in shadow mode: every request goes upstream as sent.
func (x *exchange) shadow() bool { return x.s.cfg.Mode == ModeShadow }

// readShadowBody reads r's body up to limit: whole says it all came; when it did not,
// body is what was read, and the rest is still in r.Body (nothing is lost: the request
// is forwarded as sent).
func readShadowBody(r *http.Request, limit int64) (body []byte, whole bool, err error) {
	body, err = io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, false, err
	}
	return body, int64(len(body)) <= limit, nil
}

// shadowRequest serves a request in shadow mode: whatever Compactor cannot do with it
// (no conversation named, a bad id, NATS down), it goes upstream as sent.
func (x *exchange) shadowRequest(body []byte) {
	s := x.s
	id, err := identify(x.r.Header, body, s.cfg.SessionHeaders, s.cfg.BodyField)
	switch {
	case err != nil:
		x.pass(body, "", PassShadowUnread)
		return
	case id.conv == "":
		x.pass(body, "", PassNoConversation)
		return
	}
	x.span.SetAttributes(attribute.String(conversationAttribute, id.conv))
	if nc := s.opts.NATS; nc != nil && !nc.IsConnected() {
		x.natsDown(body, id.conv, nats.ErrDisconnected)
		return
	}
	x.compact(body, id.conv)
}

// conversationAttribute is the span attribute of a conversation id (the exporter
// hashes it when the operator asks for it).
const conversationAttribute = "compactor.conversation"

// compact serves a request of a rewritten path in named steps: parse it, tell what
// kind of request it is, prepare its turn, then answer it from the summary or send the
// compacted context upstream.
func (x *exchange) compact(body []byte, conv string) {
	req, ok := x.parse(body, conv)
	if !ok {
		return
	}
	kind := x.classify(body, req)
	turn, ok := x.prepare(body, conv, req, kind)
	if !ok {
		return
	}
	if kind.compaction && turn.Branch != "" {
		// A compaction request from a history that lost the conversation's newest
		// message (Claude Code compacts from before the reply that reported the usage
		// it compacts for): answered, or forwarded, for what the client has, but no
		// branch is made of it; the agent's next history goes on from the conversation.
		x.side = true
	}
	switch {
	case x.shadow() && x.rt.compact:
		x.wouldAnswer = x.canAnswer(turn, kind)
		x.forwardCompact(req, turn, "")
	case x.shadow():
		// As sent: Compactor answers nothing itself in shadow mode; the ledger books
		// whether rewrite mode would have.
		x.wouldAnswer = x.canAnswer(turn, kind)
		x.forward(req, turn)
	case x.rt.compact:
		x.answerCompact(body, req, turn)
	case kind.compaction && x.answer(req, turn, kind.prompt):
	default:
		x.forward(req, turn)
	}
}

// parse reads the body with the wire: a request its wire hands back is passed through,
// one it refuses answered. ok says the request goes on.
func (x *exchange) parse(body []byte, conv string) (*Request, bool) {
	req, err := x.wire.Parse(body)
	var pt *wire.Passthrough
	switch {
	case errors.As(err, &pt):
		x.pass(body, conv, pt.Reason)
		return nil, false
	case err != nil && x.shadow():
		x.pass(body, conv, PassShadowUnread) // in shadow mode nothing the proxy decides reaches the client
		return nil, false
	case err != nil:
		x.refuseErr(err)
		return nil, false
	}
	// A client is not a producer: Compactor's own fields are never taken from it,
	// whatever its wire read.
	for i := range req.Messages {
		wire.ClearCompactorFields(&req.Messages[i])
	}
	return req, true
}

// requestKind is what a request is besides a turn of its conversation.
type requestKind struct {
	// compaction: the agent asks for a summary of its conversation (prompt says how it
	// was recognised), or the request is the API's compaction endpoint.
	compaction bool
	prompt     CompactionPrompt
}

// classify tells a compaction request (compactionPrompt, or the compaction endpoint)
// and a side request (sideRequest, or a compaction the agent runs as a side task: its
// reply is not stored) from a turn.
func (x *exchange) classify(body []byte, req *Request) requestKind {
	var k requestKind
	k.prompt, k.compaction = compactionPrompt(x.s.prompts, x.r.Header, req.Messages)
	if x.rt.compact {
		k.prompt, k.compaction = CompactionPrompt{Agent: "compact-endpoint"}, true
	}
	x.side = k.compaction && k.prompt.Side || !k.compaction && sideRequest(x.rt.api, body, req.Messages)
	return k
}

// prepare prepares the request's turn in conv: its owner, its bounds, what the model
// is sent. ok says the request goes on (otherwise it was answered: NATS down, a refusal).
func (x *exchange) prepare(body []byte, conv string, req *Request, kind requestKind) (*Turn, bool) {
	owner := AnyOwner
	if x.s.cfg.BindOwner {
		owner = ownerDigest(x.s.ownerKey, credential(x.r))
	}
	opts := TurnOptions{Owner: owner, MaxOutput: req.MaxOutput, Compaction: kind.compaction,
		Reserve: reserve(body), Wait: x.s.cfg.Wait, CacheTTL: x.s.cfg.CacheTTL}
	if x.shadow() {
		opts.Wait = 0 // the request goes as sent: it waits for no compaction
	}
	turn, err := x.s.convs.Prepare(x.r.Context(), conv, req.Messages, opts)
	switch {
	case err != nil && x.shadow() && x.r.Context().Err() == nil:
		// In shadow mode the client gets what it would without Compactor: a refusal
		// (another credential's conversation, NATS down) is the ledger's loss, not the
		// client's.
		x.s.log.Warn().Err(err).Str("api", x.wire.Name()).Msg("proxy: shadow mode: the turn was not prepared; forwarded as sent, not booked")
		x.pass(body, conv, PassShadowUnread)
		return nil, false
	case err != nil && connectionError(err) != nil && x.r.Context().Err() == nil:
		x.natsDown(body, conv, err)
		return nil, false
	case err != nil:
		x.refuseErr(err)
		return nil, false
	}
	x.report.Turn = turn
	x.link(turn)
	return turn, true
}

// forward builds the upstream request of the turn's context and sends it: the built
// one in rewrite mode, the client's own in shadow mode. Either way the ledger books
// both first.
func (x *exchange) forward(req *Request, turn *Turn) {
	if x.shadow() {
		x.bookSent(req, turn, reserve(req.Body))
		x.w.Header().Set(StatusHeader, StatusShadow)
		x.send(req.Body, turn)
		return
	}
	if x.side {
		x.w.Header().Set(SideHeader, "true")
	}
	out, err := x.wire.Build(req, turn.Context)
	if err != nil {
		x.s.log.Error().Err(err).Str("api", x.wire.Name()).Msg("proxy: build the upstream request")
		x.refuse(http.StatusInternalServerError, "api_error", "the proxy could not build the upstream request")
		return
	}
	x.bookSent(req, turn, reserve(req.Body))
	setTurnHeaders(x.w.Header(), turn)
	x.send(out, turn)
}

// send sends the rewritten body upstream and relays the answer.
func (x *exchange) send(out []byte, turn *Turn) {
	upReq, err := x.up.newRequest(x.r, out)
	if err != nil {
		x.refuse(http.StatusInternalServerError, "api_error", "the proxy could not build the upstream request")
		return
	}
	t0 := time.Now()
	resp, err := x.s.client.Do(upReq)
	if err != nil {
		x.upstream += time.Since(t0)
		x.upstreamUnreachable(err)
		return
	}
	defer resp.Body.Close()
	defer func() { x.upstream += time.Since(t0) }()
	x.status = resp.StatusCode
	switch {
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		x.relayError(resp)
	case x.rt.compact && !isEventStream(resp.Header):
		x.relayCompact(resp)
	case isEventStream(resp.Header):
		x.relayStream(resp, turn)
	default:
		x.relayReply(resp, turn)
	}
}

// isEventStream reports whether a response is server-sent events.
func isEventStream(h http.Header) bool {
	ct := strings.ToLower(h.Get("Content-Type"))
	return strings.HasPrefix(strings.TrimSpace(ct), "text/event-stream")
}

// relayError gives the client the upstream's refusal verbatim: status, headers
// (retry-after, x-ratelimit-*, request ids) and body. Nothing is stored for it.
func (x *exchange) relayError(resp *http.Response) {
	x.report.Outcome = OutcomeUpstreamError
	x.span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	copyResponseHeaders(x.w.Header(), resp.Header)
	x.w.WriteHeader(resp.StatusCode)
	_, _ = copyFlushing(x.w, resp.Body)
}

// copyFlushing copies src to w, flushing after each read.
func copyFlushing(w http.ResponseWriter, src io.Reader) (int64, error) {
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	var n int64
	for {
		k, err := src.Read(buf)
		if k > 0 {
			if _, werr := w.Write(buf[:k]); werr != nil {
				return n, werr
			}
			_ = rc.Flush()
			n += int64(k)
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// maxReply bounds the bytes of an upstream's reply the proxy keeps to store it (a
// whole reply, or the events of a stream): a larger one is relayed, not stored.
var maxReply = 64 << 20 // a var: tests lower it

// relayReply handles a whole (not streamed) 2xx reply: stored, then given to the
// client verbatim.
func (x *exchange) relayReply(resp *http.Response, turn *Turn) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(maxReply)+1))
	if err == nil && len(body) > maxReply {
		// Too large to keep: given to the client as it comes, not stored.
		x.s.log.Warn().Str("api", x.wire.Name()).Int("over_bytes", maxReply).Msg("proxy: upstream reply too large to store; relayed, not stored")
		x.report.Outcome = OutcomeCompacted
		copyResponseHeaders(x.w.Header(), resp.Header)
		x.w.WriteHeader(resp.StatusCode)
		_, _ = x.w.Write(body)
		_, _ = io.Copy(x.w, resp.Body)
		return
	}
	if err != nil {
		x.report.Outcome = OutcomeFailed
		if x.r.Context().Err() != nil {
			return // the client went away: nothing stored
		}
		x.refuse(http.StatusBadGateway, "api_error", "the upstream's reply broke off before its end")
		return
	}
	x.span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	x.report.Outcome = OutcomeCompacted
	if msg, usage, err := x.wire.Reply(body); err != nil {
		x.s.log.Warn().Err(err).Str("api", x.wire.Name()).Msg("proxy: upstream reply not understood; not stored")
	} else {
		x.finish(turn, msg, usage)
	}
	copyResponseHeaders(x.w.Header(), resp.Header)
	x.w.WriteHeader(resp.StatusCode)
	_, _ = x.w.Write(body)
}

// natsDown answers a request while NATS is unreachable: 503, or the request forwarded
// as sent, as the operator chose.
func (x *exchange) natsDown(body []byte, conv string, cause error) {
	x.s.log.Warn().Str("cause", errorKind(cause)).Str("api", x.wire.Name()).Str("on_nats_down", x.s.cfg.OnNATSDown).
		Msg("proxy: NATS unavailable")
	x.span.SetAttributes(attribute.String("compactor.proxy.nats", "unavailable"))
	if x.s.cfg.OnNATSDown == NATSDownPass || x.shadow() {
		x.pass(body, conv, PassNATSDown)
		return
	}
	x.report.Outcome = OutcomeFailed
	x.w.Header().Set(ConversationHeader, conv)
	x.writeError(http.StatusServiceUnavailable, "api_error",
		"compactor proxy: the conversation store (NATS) is unavailable; try again later")
}

// pass forwards the request as the client sent it, marked with why.
func (x *exchange) pass(body []byte, conv, reason string) {
	x.passBody(io.NopCloser(bytes.NewReader(body)), int64(len(body)), conv, reason)
}

// passReader forwards the request whose body is body, as long as the client said.
func (x *exchange) passReader(body io.Reader, conv, reason string) {
	x.passBody(io.NopCloser(body), x.r.ContentLength, conv, reason)
}

// passBody forwards the request with body (of length n, -1 when unknown), marked.
func (x *exchange) passBody(body io.ReadCloser, n int64, conv, reason string) {
	x.report.Outcome = OutcomePassthrough
	if conv != "" {
		x.w.Header().Set(ConversationHeader, conv)
	}
	r := withPassthrough(x.r, reason)
	r.Body = body
	r.ContentLength = n
	t0 := time.Now()
	x.s.rp.ServeHTTP(x.w, r)
	x.upstream += time.Since(t0)
}

// passthroughError answers a passed-through request whose upstream could not be
// reached: 502 in the API's error shape.
func (s *Server) passthroughError(w http.ResponseWriter, r *http.Request, err error) {
	timedOut := bodyTimedOut(r, err)
	if r.Context().Err() != nil && !timedOut {
		return // the client went away (a body that timed out also ends the context)
	}
	// r is the request as sent upstream: its URL is the upstream's, logged without its
	// user information or query (either may hold a key).
	target := *r.URL
	target.User, target.RawQuery, target.ForceQuery = nil, "", false
	msg := "proxy: upstream unreachable"
	if timedOut {
		msg = "proxy: the client's request body did not come in time"
	}
	s.log.Warn().Str("upstream", target.String()).Str("cause", causeOf(err, append(requestSecrets(r), s.cfg.UpstreamKey, s.cfg.AnthropicUpstreamKey, s.cfg.GeminiUpstreamKey)...)).
		Msg(msg)
	reason, _ := r.Context().Value(passthroughKey{}).(string)
	if reason == "" {
		reason = PassNotRewritten
	}
	w.Header().Set(StatusHeader, StatusPassthrough)
	w.Header().Set(PassthroughHeader, reason)
	switch {
	case timedOut:
		s.writeError(w, routeOf(r).api, http.StatusRequestTimeout, "invalid_request_error", "compactor proxy: the request body did not come within COMPACTOR_PROXY_READ_TIMEOUT")
	case errors.Is(err, errUpstreamHeaders):
		s.writeError(w, routeOf(r).api, http.StatusGatewayTimeout, "api_error", "compactor proxy: "+errUpstreamHeaders.Error())
	default:
		s.writeError(w, routeOf(r).api, http.StatusBadGateway, "api_error", "compactor proxy: the upstream could not be reached")
	}
}

// upstreamUnreachable answers a rewritten request whose upstream could not be
// reached (nothing is stored for it).
func (x *exchange) upstreamUnreachable(err error) {
	x.report.Outcome = OutcomeFailed
	if x.r.Context().Err() != nil {
		return // the client went away
	}
	x.s.log.Warn().Str("upstream", x.up.String()).Str("path", x.r.URL.Path).Str("api", x.wire.Name()).
		Str("cause", causeOf(err, append(requestSecrets(x.r), x.up.key)...)).Msg("proxy: upstream unreachable")
	if errors.Is(err, errUpstreamHeaders) {
		x.writeError(http.StatusGatewayTimeout, "api_error", "compactor proxy: "+errUpstreamHeaders.Error())
		return
	}
	x.writeError(http.StatusBadGateway, "api_error", "compactor proxy: the upstream could not be reached")
}

// refuseErr answers a request that Parse or Prepare refused.
func (x *exchange) refuseErr(err error) {
	switch {
	case errors.Is(err, ErrNotOwner):
		x.refuse(http.StatusForbidden, "permission_error", "compactor proxy: "+err.Error())
	case errors.Is(err, ErrBadRequest):
		x.refuse(http.StatusBadRequest, "invalid_request_error", err.Error())
	case x.r.Context().Err() != nil:
		x.report.Outcome = OutcomeFailed
	default:
		x.s.log.Error().Err(err).Str("api", x.wire.Name()).Msg("proxy: prepare the turn")
		x.report.Outcome = OutcomeFailed
		x.writeError(http.StatusInternalServerError, "api_error", "compactor proxy: the conversation could not be prepared")
	}
}

// refuse answers with an error the proxy itself decided.
func (x *exchange) refuse(status int, kind, msg string) {
	x.report.Outcome = OutcomeRefused
	if status >= 500 {
		x.report.Outcome = OutcomeFailed
	}
	x.writeError(status, kind, msg)
}

func (x *exchange) writeError(status int, kind, msg string) {
	x.span.SetAttributes(attribute.Int("http.response.status_code", status))
	if x.w.Header().Get(StatusHeader) == "" {
		x.w.Header().Set(StatusHeader, StatusPassthrough)
	}
	x.s.writeError(x.w, x.rt.api, status, kind, msg)
}

// canAnswer says rewrite mode would answer the request from Compactor's summary (answer
// or answerCompact), without answering it.
func (x *exchange) canAnswer(turn *Turn, kind requestKind) bool {
	if !x.s.cfg.AnswerCompactions || turn.Cut {
		return false
	}
	if x.rt.compact {
		if _, ok := x.wire.(wire.CompactAnswerer); !ok {
			return false
		}
		_, ok := compactionAnswerOf(turn.Context, FormatPlain, false)
		return ok
	}
	if _, ok := x.wire.(wire.Answerer); !ok || !kind.compaction {
		return false
	}
	_, ok := compactionAnswer(turn, kind.prompt.Format)
	return ok
}

// answer answers the request from Compactor's summary when it is an agent's request
// to summarize its own conversation (compactionPrompt) and the summary covers it (the
// turn's context holds one, not cut): the prompt and the answer are stored as the
// turn, so the agent's next history, which holds the answer, continues the
// conversation. It reports whether it answered.
func (x *exchange) answer(req *Request, turn *Turn, p CompactionPrompt) bool {
	a, ok := x.wire.(wire.Answerer)
	if !x.s.cfg.AnswerCompactions || !ok || turn.Cut {
		return false
	}
	text, ok := compactionAnswer(turn, p.Format)
	if !ok {
		x.s.log.Debug().Str("agent", p.Agent).Str("api", x.wire.Name()).Msg("proxy: a compaction request with no summary to answer it from; forwarded")
		return false
	}
	usage := answerUsage(turn.Context, text)
	stream := req.Stream || strings.HasSuffix(x.r.URL.Path, ":streamGenerateContent")
	reply := schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text(text)}
	body, err := a.Answer(req, reply, usage, stream)
	if err != nil {
		x.s.log.Error().Err(err).Str("api", x.wire.Name()).Msg("proxy: answer a compaction request")
		return false
	}
	x.bookAnswered(req, turn)
	x.finish(turn, reply, nil) // stored unless a side request; the usage is the proxy's own estimate: it calibrates nothing
	x.report.Outcome, x.report.Usage = OutcomeAnswered, &usage
	h := x.w.Header()
	setTurnHeaders(h, turn)
	h.Set(AnsweredHeader, p.Agent)
	h.Set("Content-Type", "application/json")
	if stream {
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
	}
	x.w.WriteHeader(http.StatusOK)
	_, _ = x.w.Write(body)
	return true
}

// answerCompact answers a request of the API's compaction endpoint (POST
// /v1/responses/compact) from Compactor's summary: the summary and the messages since,
// as items the client reads (never the provider's opaque compaction items). The
// client's new messages and the answer are stored, so the client's next history, which
// carries the answer, continues the conversation. With no summary yet, the request is
// forwarded as sent, and nothing is stored.
func (x *exchange) answerCompact(body []byte, req *Request, turn *Turn) {
	a := x.wire.(wire.CompactAnswerer)
	text, ok := "", false
	if x.s.cfg.AnswerCompactions && !turn.Cut {
		text, ok = compactionAnswerOf(turn.Context, FormatPlain, false)
	}
	if !ok {
		x.forwardCompact(req, turn, PassNoSummary)
		return
	}
	usage := answerUsage(turn.Context, text)
	out, err := a.AnswerCompact(req, text, usage)
	if err != nil {
		x.s.log.Error().Err(err).Str("api", x.wire.Name()).Msg("proxy: answer a compact request")
		x.refuse(http.StatusInternalServerError, "api_error", "compactor proxy: the compaction could not be answered")
		return
	}
	x.bookAnswered(req, turn)
	x.finish(turn, schemas.Message{Role: schemas.RoleAssistant, Content: schemas.Text(text)}, nil)
	x.report.Outcome, x.report.Usage = OutcomeAnswered, &usage
	setTurnHeaders(x.w.Header(), turn)
	x.w.Header().Set(AnsweredHeader, "compact-endpoint")
	x.w.Header().Set("Content-Type", "application/json")
	x.w.WriteHeader(http.StatusOK)
	_, _ = x.w.Write(out)
}

// forwardCompact sends a request of the API's compaction endpoint upstream as the
// client sent it: in rewrite mode when Compactor has no summary to answer it from
// (passed through, marked with reason), in shadow mode always. The ledger books it as
// sent on both sides, since rewrite mode too sends it as it came (or, when it would
// answer it, calls no model: would_answer). The provider's reply, its own compaction of
// the history, is relayed and not stored: the client's next request carries it.
func (x *exchange) forwardCompact(req *Request, turn *Turn, reason string) {
	x.side = true // not stored, not remembered as the conversation's latest request
	x.bookSentAsSent(req, turn, reserve(req.Body))
	h := x.w.Header()
	h.Set(ConversationHeader, turn.Conv)
	if x.shadow() {
		h.Set(StatusHeader, StatusShadow)
	} else {
		h.Set(StatusHeader, StatusPassthrough)
		h.Set(PassthroughHeader, reason)
	}
	x.send(req.Body, turn)
}

// relayCompact handles a whole 2xx reply of the API's compaction endpoint to a request
// forwardCompact sent: relayed verbatim, its usage read for the ledger, nothing stored.
func (x *exchange) relayCompact(resp *http.Response) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(maxReply)+1))
	if err != nil {
		x.report.Outcome = OutcomeFailed
		if x.r.Context().Err() == nil {
			x.refuse(http.StatusBadGateway, "api_error", "the upstream's reply broke off before its end")
		}
		return
	}
	x.span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	x.report.Outcome = OutcomePassthrough
	if x.shadow() {
		x.report.Outcome = OutcomeCompacted // as every request shadow mode books
	}
	if len(body) <= maxReply {
		x.report.Usage = x.wire.(wire.CompactAnswerer).CompactUsage(body)
	}
	copyResponseHeaders(x.w.Header(), resp.Header)
	x.w.WriteHeader(resp.StatusCode)
	_, _ = x.w.Write(body)
	_, _ = io.Copy(x.w, resp.Body)
}

// sideRequest says a request of api with msgs is a side task the agent runs on its
// session: a system message holds one of DefaultSidePrompts (OpenCode's title
// generator), or a Gemini request asks for structured output (a JSON schema or JSON
// MIME type in generationConfig: Gemini CLI's router, next-speaker and loop checks). Its
// history is the conversation's, so it is sent compacted, but its reply is not part of
// the conversation and is not stored.
func sideRequest(api string, body []byte, msgs []schemas.Message) bool {
	for _, p := range DefaultSidePrompts {
		if systemHolds(msgs, p) {
			return true
		}
	}
	if api != APIGemini {
		return false
	}
	f, err := wire.FieldMap(body)
	if err != nil {
		return false
	}
	var gc struct {
		MimeType  string          `json:"responseMimeType"`
		Schema    json.RawMessage `json:"responseSchema"`
		JSON      json.RawMessage `json:"responseJsonSchema"`
		MimeType2 string          `json:"response_mime_type"`
		Schema2   json.RawMessage `json:"response_schema"`
	}
	for _, k := range []string{"generationConfig", "generation_config"} {
		if v, ok := f[k]; ok && json.Unmarshal(v, &gc) == nil {
			if gc.MimeType == "application/json" || gc.MimeType2 == "application/json" || len(gc.Schema) > 0 || len(gc.JSON) > 0 || len(gc.Schema2) > 0 {
				return true
			}
		}
	}
	return false
}

// finishTimeout bounds the storing of a reply.
const finishTimeout = 30 * time.Second

// finish stores a whole reply.
func (x *exchange) finish(turn *Turn, msg schemas.Message, usage *Usage) {
	x.report.Usage = usage
	if x.side {
		return
	}
	if x.shadow() {
		// The usage is of the client's request, not of the compacted context: it must
		// not calibrate the conversation's estimate.
		usage = nil
	}
	// The whole reply came: it is stored even when the client closes at once (SDKs
	// close the moment they have read the end), within a bound of its own.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(x.r.Context()), finishTimeout)
	defer cancel()
	if err := x.s.convs.Finish(ctx, turn, msg, usage); err != nil {
		x.s.log.Error().Err(err).Str("api", x.wire.Name()).Msg("proxy: store the reply")
		return
	}
	x.report.Stored++
}

// link joins the request's span to the compaction's trace, when the Conversations
// says which it is.
func (x *exchange) link(t *Turn) {
	if l, ok := x.s.convs.(TurnTracer); ok {
		if sc := l.TurnSpanContext(t); sc.IsValid() {
			x.span.AddLink(trace.Link{SpanContext: sc})
		}
	}
	if t.Branch != "" {
		x.span.SetAttributes(attribute.String("compactor.proxy.branch", t.Branch))
	}
}

// end reports the request to the observer, books its done entry in the ledger and
// ends its span. An answer whose reply was not put together (an error, a reply too
// large to keep) is booked without usage; a stream that broke off, or a client gone,
// stays unsettled.
func (x *exchange) end() {
	r := &x.report
	if r.Outcome == "" {
		r.Outcome = OutcomeFailed
	}
	if r.Outcome != OutcomeFailed {
		x.bookDone(x.status, r.Usage)
	}
	if r.Turn != nil {
		r.Stored += r.Turn.Published
	}
	r.Added = max(time.Since(x.start)-x.upstream, 0)
	x.span.SetAttributes(attribute.String("compactor.proxy.outcome", r.Outcome))
	if r.Turn != nil && r.Turn.Context != nil {
		x.span.SetAttributes(attribute.Int64("compactor.generation", int64(r.Turn.Context.Generation)),
			attribute.Int("compactor.proxy.tokens_sent", r.Turn.Context.Tokens), attribute.Int("compactor.proxy.tokens_client", r.Turn.ClientTokens))
	}
	if r.Outcome == OutcomeFailed {
		x.span.SetStatus(codes.Error, r.Outcome)
	}
	x.span.End()
	ev := x.s.log.Debug().Str("api", r.API).Str("outcome", r.Outcome).Dur("added", r.Added).Int("stored", r.Stored)
	if r.Turn != nil {
		ev = ev.Str("conversation", r.Turn.Conv).Str("branch", r.Turn.Branch).Bool("cut", r.Turn.Cut)
	}
	ev.Msg("proxy: request")
	if o := x.s.opts.Observer; o != nil {
		o.ProxyRequest(r.metrics())
	}
}

// conversationFields are the top-level fields that carry a conversation in one of the
// APIs (messages and system; Responses' input and instructions; Gemini's contents and
// systemInstruction): what the compacted context replaces.
var conversationFields = map[string]bool{"messages": true, "system": true, "input": true, "instructions": true,
	"contents": true, "systemInstruction": true, "system_instruction": true}

// reserve is the tokens a request body takes besides its conversation (tools, their
// schemas, a response format...): its bytes outside the conversation's fields, 4 to a
// token, as the estimate counts text.
func reserve(body []byte) int {
	fields, err := wire.TopFields(body)
	if err != nil {
		return 0
	}
	n := len(body)
	for _, f := range fields {
		if conversationFields[f.Key] {
			n -= f.VEnd - f.VStart
		}
	}
	return max(n, 0) / 4
}

// TurnTracer is implemented by a Conversations that knows the span of the compaction
// a turn's context comes from: the request's span links to it.
type TurnTracer interface {
	TurnSpanContext(t *Turn) trace.SpanContext
}

// connectionErrors are the errors that say NATS could not be reached: no responders,
// a timeout, a closed or reconnecting connection.
var connectionErrors = []error{nats.ErrNoResponders, nats.ErrTimeout, nats.ErrConnectionClosed, nats.ErrDisconnected,
	nats.ErrConnectionReconnecting, nats.ErrConnectionDraining, natsjs.ErrNoStreamResponse, context.DeadlineExceeded}

// connectionError is the one of connectionErrors err matches (nil: none).
func connectionError(err error) error {
	for _, e := range connectionErrors {
		if errors.Is(err, e) {
			return e
		}
	}
	return nil
}

// errorKind is a short name of an error's kind for a log line: never its text, which
// may quote an upstream URL with a key or content.
func errorKind(err error) string {
	switch {
	case err == nil:
		return ""
	case connectionError(err) != nil:
		return "nats: " + connectionError(err).Error()
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	var ne interface{ Timeout() bool }
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	return "error"
}

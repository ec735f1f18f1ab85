package fakeupstream

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
)

// parseGemini reads a Gemini API body: contents as Messages and systemInstruction
// as System (the model and the stream come from the path).
// A countTokens body may carry its request whole, as generateContentRequest: its
// fields are read then.
func parseGemini(r *Request) error {
	fields := r.Fields
	if inner := present(r.Fields["generateContentRequest"]); inner != nil && present(r.Fields["contents"]) == nil {
		if err := json.Unmarshal(inner, &fields); err != nil {
			return fmt.Errorf("generateContentRequest: not a JSON object: %v", err)
		}
	}
	if err := json.Unmarshal(fields["contents"], &r.Messages); err != nil || len(r.Messages) == 0 {
		return fmt.Errorf("contents: must be a non-empty array")
	}
	r.System = present(fields["systemInstruction"])
	if r.System == nil {
		r.System = present(fields["system_instruction"])
	}
	return nil
}

// GeminiSignature is the thoughtSignature the server puts on the first
// function-call part of its id-th answer (the X-Request-Id's number).
func GeminiSignature(id int) string {
	return base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "fakeupstream-thought/%d", id))
}

// answerGemini writes the reply as the Gemini API does, streamed (each event one
// GenerateContentResponse) or not: a text part, then one functionCall part a tool
// call, the first of them carrying a thoughtSignature (as Gemini 3 does for
// parallel calls).
func (s *Server) answerGemini(o *writer, id int, u *Usage) {
	respID := fmt.Sprintf("fakeresp%d", id)
	var parts []map[string]any
	if o.rep.Text != "" {
		parts = append(parts, map[string]any{"text": o.rep.Text})
	}
	for i, c := range o.rep.ToolCalls {
		var args any = map[string]any{}
		if c.Arguments != "" {
			_ = json.Unmarshal([]byte(c.Arguments), &args)
		}
		fc := map[string]any{"name": c.Name, "args": args}
		if c.ID != "" {
			fc["id"] = c.ID
		}
		p := map[string]any{"functionCall": fc}
		if i == 0 {
			p["thoughtSignature"] = GeminiSignature(id)
			s.setSignatures(o.r, []string{GeminiSignature(id)})
		}
		parts = append(parts, p)
	}
	full := map[string]any{"promptTokenCount": u.Input, "candidatesTokenCount": u.Output, "totalTokenCount": u.Input + u.Output}
	prompt := map[string]any{"promptTokenCount": u.Input, "totalTokenCount": u.Input}
	if u.CacheRead > 0 { // proto3 JSON leaves out a zero count
		full["cachedContentTokenCount"] = u.CacheRead
		prompt["cachedContentTokenCount"] = u.CacheRead
	}
	chunk := func(parts []map[string]any, last bool) map[string]any {
		cand := map[string]any{"content": map[string]any{"parts": parts, "role": "model"}, "index": 0}
		usage := prompt
		if last {
			cand["finishReason"] = "STOP"
			usage = full
		}
		return map[string]any{"candidates": []any{cand}, "usageMetadata": usage, "modelVersion": o.r.Model, "responseId": respID}
	}
	if !o.r.Stream {
		if parts == nil {
			parts = []map[string]any{{"text": ""}}
		}
		o.writeJSON(chunk(parts, true))
		return
	}
	// The stream: the text in pieces, then each function call whole, the last chunk
	// with the finish reason and the full usage.
	var chunks [][]map[string]any
	for _, piece := range pieces(o.rep.Text) {
		chunks = append(chunks, []map[string]any{{"text": piece}})
	}
	for _, p := range parts {
		if _, ok := p["functionCall"]; ok {
			chunks = append(chunks, []map[string]any{p})
		}
	}
	if chunks == nil {
		chunks = [][]map[string]any{{{"text": ""}}}
	}
	o.startStream()
	errEvent := func() []sse {
		return one("", geminiError(http.StatusInternalServerError, "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting", ""))
	}
	for i, c := range chunks {
		o.event("", chunk(c, i == len(chunks)-1), errEvent)
	}
}

// geminiError is Gemini's error body: the status as code, its canonical name as
// status, and retryAfter (seconds, when not "") as a RetryInfo detail.
func geminiError(status int, message, retryAfter string) map[string]any {
	e := map[string]any{"code": status, "message": message, "status": geminiStatus(status)}
	if retryAfter != "" {
		e["details"] = []any{map[string]any{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": retryAfter + "s"}}
	}
	return map[string]any{"error": e}
}

// geminiStatus is the google.rpc.Code name Gemini answers an HTTP status with.
func geminiStatus(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "INVALID_ARGUMENT"
	case http.StatusUnauthorized:
		return "UNAUTHENTICATED"
	case http.StatusForbidden:
		return "PERMISSION_DENIED"
	case http.StatusNotFound:
		return "NOT_FOUND"
	case http.StatusTooManyRequests:
		return "RESOURCE_EXHAUSTED"
	case http.StatusServiceUnavailable:
		return "UNAVAILABLE"
	case http.StatusGatewayTimeout:
		return "DEADLINE_EXCEEDED"
	}
	return "INTERNAL"
}

package proxy

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/compactor/compactor/schemas"
)

// ConversationHeader names the conversation a request belongs to. Its value must be a
// valid conversation id (schemas.ValidateConversationID): one that is not is refused
// with 400.
const ConversationHeader = "X-Compactor-Conversation"

// DefaultSessionHeaders are the session headers real agents send, looked at in this
// order when a request has no ConversationHeader: Claude Code's, Codex's (session-id,
// thread-id), OpenCode's (x-session-id; x-opencode-session in older versions).
var DefaultSessionHeaders = []string{"X-Claude-Code-Session-Id", "session-id", "thread-id", "x-session-id", "x-opencode-session"}

// sessionIDPrefix starts the conversation id a session value that breaks the id rule is
// mapped to: "s-" and the hex of the first 128 bits of the value's SHA-256. The same
// value always gives the same id, and different values collide only as SHA-256 does.
// It hashes the client's own session name, never the content of the conversation.
const sessionIDPrefix = "s-"

// identity is which conversation a request names, and where the name came from.
type identity struct {
	conv string
	// from is the header or body field the conversation came from.
	from string
}

// identify finds the conversation of a request: the ConversationHeader, else the first
// of the session headers that is set, else the body field (a dotted path to a string).
// A conversation header that breaks the id rule is an error (the client named an id);
// a session header's or body field's value that breaks it is mapped to a valid id (see
// sessionIDPrefix). The zero identity means the request names no conversation.
func identify(h http.Header, body []byte, sessionHeaders []string, bodyField string) (identity, error) {
	if v := h.Get(ConversationHeader); v != "" {
		if err := schemas.ValidateConversationID(v); err != nil {
			return identity{}, fmt.Errorf("%w: header %s: %v", ErrBadRequest, ConversationHeader, err)
		}
		return identity{conv: v, from: ConversationHeader}, nil
	}
	for _, name := range sessionHeaders {
		if v := strings.TrimSpace(h.Get(name)); v != "" {
			return identity{conv: sessionConversation(v), from: name}, nil
		}
	}
	if v := userIDSession(body); v != "" {
		return identity{conv: sessionConversation(v), from: "body:metadata.user_id"}, nil
	}
	if bodyField != "" {
		if v := bodyString(body, bodyField); v != "" {
			return identity{conv: sessionConversation(v), from: "body:" + bodyField}, nil
		}
	}
	return identity{}, nil
}

// userIDSession is the session an Anthropic request's metadata.user_id names, as
// Claude Code writes it: a string holding a JSON object with a session_id, or (older
// versions) ending in "_session_<id>". A user_id of any other form names a user, not a
// session, and gives "".
func userIDSession(body []byte) string {
	uid := bodyString(body, "metadata.user_id")
	if uid == "" {
		return ""
	}
	if strings.HasPrefix(uid, "{") {
		return bodyString([]byte(uid), "session_id")
	}
	if i := strings.LastIndex(uid, "_session_"); i >= 0 {
		return strings.TrimSpace(uid[i+len("_session_"):])
	}
	return ""
}

// sessionConversation is the conversation id of a client's session value: the value
// itself when the proxy can take it as an id (the id rule, no longer than
// MaxConversationIDLen, no BranchSep), else sessionIDPrefix and the hex of the first 16
// bytes of its SHA-256.
func sessionConversation(v string) string {
	if schemas.ValidateConversationID(v) == nil && len(v) <= MaxConversationIDLen && !strings.Contains(v, BranchSep) {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	return sessionIDPrefix + hex.EncodeToString(sum[:16])
}

// bodyString is the string at the dotted path of a JSON object body ("" when the body
// is not an object, the path is missing, or its value is not a string).
func bodyString(body []byte, path string) string {
	raw := json.RawMessage(body)
	for part := range strings.SplitSeq(path, ".") {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil {
			return ""
		}
		v, ok := obj[part]
		if !ok {
			return ""
		}
		raw = v
	}
	raw = bytes.TrimSpace(raw)
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return strings.TrimSpace(s)
}

// ownerDomain prefixes the credential hashed without an owner key, so the digest is of
// no use as a plain SHA-256 of the key anywhere else.
const ownerDomain = "compactor-proxy-owner\x00"

// credential is the credential a request came with: its x-api-key, else its
// Authorization header, else its x-goog-api-key or ?key= (Gemini's, both the same key,
// marked so), "" when none.
func credential(r *http.Request) string {
	h := r.Header
	if v := h.Get("X-Api-Key"); v != "" {
		return v
	}
	if v := h.Get("Authorization"); v != "" {
		return v
	}
	if v := h.Get("X-Goog-Api-Key"); v != "" {
		return "goog-api-key:" + v
	}
	if v := r.URL.Query().Get("key"); v != "" {
		return "goog-api-key:" + v
	}
	return ""
}

// ownerDigest is the digest of a credential that binds a conversation to it
// (TurnOptions.Owner): HMAC-SHA256 keyed with the operator's owner key, or SHA-256 of
// ownerDomain and the credential when there is no key; 32 hex digits (128 bits). ""
// for no credential.
func ownerDigest(key []byte, cred string) string {
	if cred == "" {
		return ""
	}
	var sum []byte
	if len(key) > 0 {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(cred))
		sum = m.Sum(nil)
	} else {
		s := sha256.Sum256([]byte(ownerDomain + cred))
		sum = s[:]
	}
	return hex.EncodeToString(sum[:16])
}

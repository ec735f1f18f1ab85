package schemas

import (
	_ "embed"
	"encoding/json"
	"io"
	"strings"
)

// RecallToolJSON is recall-tool.json: the OpenAI tool definition ({"type":"function",
// "function":{name, description, parameters}}) of the recall operation, ready for the
// tools of a chat completion request (it decodes into go-openai's openai.Tool). Its
// parameters are a RecallRequest without the conversation: the agent answers the call
// for the conversation it is in (DecodeRecallArguments).
//
//go:embed recall-tool.json
var RecallToolJSON []byte

// RecallToolName is the function name of the recall tool.
const RecallToolName = "recall"

// maxRecallArgumentsBytes bounds the arguments of a recall tool call.
const maxRecallArgumentsBytes = 8192

// DecodeRecallArguments reads the arguments of a model's recall tool call (a JSON
// object, as text; "" means {}) into a request for conversation conv and validates it.
// Unknown arguments are refused, so a model that invents one learns it from the error;
// an error is a *ValidationError naming the argument.
func DecodeRecallArguments(conv, arguments string) (RecallRequest, error) {
	if err := ValidateConversationID(conv); err != nil {
		return RecallRequest{}, err
	}
	if len(arguments) > maxRecallArgumentsBytes {
		return RecallRequest{}, invalid("arguments", "are %d bytes long; at most %d are allowed", len(arguments), maxRecallArgumentsBytes)
	}
	if strings.TrimSpace(arguments) == "" {
		arguments = "{}"
	}
	var args struct {
		Query     string `json:"query"`
		FromSeq   uint64 `json:"from_seq"`
		ToSeq     uint64 `json:"to_seq"`
		MaxTokens int    `json:"max_tokens"`
	}
	dec := json.NewDecoder(strings.NewReader(arguments))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&args); err != nil {
		return RecallRequest{}, invalid("arguments", "must be a JSON object of query, from_seq, to_seq and max_tokens (%s)",
			strings.TrimPrefix(err.Error(), "json: "))
	}
	if _, err := dec.Token(); err != io.EOF {
		return RecallRequest{}, invalid("arguments", "must be one JSON object, with nothing after it")
	}
	r := RecallRequest{Conversation: conv, Query: args.Query, FromSeq: args.FromSeq, ToSeq: args.ToSeq, MaxTokens: args.MaxTokens}
	return r, r.Validate()
}

package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/jetstream"
	"github.com/compactor/compactor/pipeline"
	"github.com/compactor/compactor/schemas"
	"github.com/compactor/compactor/schemas/policy"
)

// Config is what the operator decides about a server.
type Config struct {
	// Conversation binds the server to one conversation: a tool call that names none
	// reads it, and one that names another is refused unless AnyConversation.
	Conversation string
	// AnyConversation lets a tool call name any conversation (the NATS user still
	// bounds what can be read); with Conversation set, that one is the default.
	AnyConversation bool
	// MaxTokens caps the budget of one recall (0: schemas.DefaultAnswerRecallMaxTokens):
	// a call that asks for more gets the cap and is told so.
	MaxTokens int
	// ScanLimit bounds how many messages one recall reads, newest first (0:
	// jetstream.DefaultRecallScanLimit).
	ScanLimit int
	// CallTimeout bounds one tool call's reads (0: DefaultCallTimeout).
	CallTimeout time.Duration
	// Version is the server's version, as its implementation info says it.
	Version string
	// AllowPin lists the pin tool, which writes: it adds a message's sequences to its
	// conversation's pins policy key through the compactor service (the NATS user must
	// be allowed to set policies). false: the server is read-only.
	AllowPin bool
}

// DefaultCallTimeout bounds one tool call when Config names no other bound.
const DefaultCallTimeout = 30 * time.Second

// Validate checks the configuration; an error says which setting is wrong.
func (c *Config) Validate() error {
	if c.Conversation == "" && !c.AnyConversation {
		return errors.New("no conversation: bind the server to one, or let the tools name any")
	}
	if c.Conversation != "" {
		if err := schemas.ValidateConversationID(c.Conversation); err != nil {
			return fmt.Errorf("conversation: %w", err)
		}
	}
	if c.MaxTokens < 0 || c.MaxTokens > schemas.MaxRecallMaxTokens {
		return fmt.Errorf("max tokens must be 0 (the default, %d) to %d, got %d", schemas.DefaultAnswerRecallMaxTokens, schemas.MaxRecallMaxTokens, c.MaxTokens)
	}
	if c.ScanLimit < 0 || c.ScanLimit > jetstream.MaxRecallScanLimit {
		return fmt.Errorf("scan limit must be 0 (the default, %d) to %d, got %d", jetstream.DefaultRecallScanLimit, jetstream.MaxRecallScanLimit, c.ScanLimit)
	}
	if c.CallTimeout < 0 {
		return fmt.Errorf("call timeout must not be negative, got %s", c.CallTimeout)
	}
	return nil
}

func (c Config) maxTokens() int {
	if c.MaxTokens == 0 {
		return schemas.DefaultAnswerRecallMaxTokens
	}
	return c.MaxTokens
}

func (c Config) callTimeout() time.Duration {
	if c.CallTimeout == 0 {
		return DefaultCallTimeout
	}
	return c.CallTimeout
}

// Tombstones reads a conversation's forget tombstone: nil when it was not forgotten
// (within the forget bucket's TTL). *jetstream.Store does; see StoreTombstones.
type Tombstones interface {
	Forgotten(ctx context.Context, conv string) (*schemas.Tombstone, error)
}

// Names of the tools.
const (
	RecallTool = "recall"
	StatusTool = "status"
	PinTool    = "pin"
)

// server answers the tools of one Server.
type server struct {
	cl    *pipeline.Client
	tombs Tombstones // nil: an unknown and a forgotten conversation cannot be told apart
	cfg   Config
}

// New returns the MCP server of cfg, reading with cl. tombs tells a forgotten
// conversation from an unknown one; nil (a user in service mode, who cannot read the
// forget bucket) says "unknown or forgotten".
func New(cl *pipeline.Client, tombs Tombstones, cfg Config) (*mcp.Server, error) {
	if cl == nil {
		return nil, errors.New("no client")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &server{cl: cl, tombs: tombs, cfg: cfg}
	version := cfg.Version
	if version == "" {
		version = "dev"
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "compactor", Title: "Compactor", Version: version},
		&mcp.ServerOptions{Instructions: s.instructions()})
	recallIn, err := s.recallSchema()
	if err != nil {
		return nil, err
	}
	statusIn, err := s.conversationSchema(jsonschema.For[StatusArgs])
	if err != nil {
		return nil, err
	}
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: new(false)}
	mcp.AddTool(srv, &mcp.Tool{Name: RecallTool, Title: "Recall raw messages", Description: s.recallDescription(),
		InputSchema: recallIn, Annotations: readOnly}, s.recall)
	mcp.AddTool(srv, &mcp.Tool{Name: StatusTool, Title: "Compaction status", Description: s.statusDescription(),
		InputSchema: statusIn, Annotations: readOnly}, s.status)
	if cfg.AllowPin {
		pinIn, err := s.conversationSchema(jsonschema.For[PinArgs])
		if err != nil {
			return nil, err
		}
		one := 1.0
		pinIn.Properties["seq"].Minimum = &one
		writes := &mcp.ToolAnnotations{ReadOnlyHint: false, DestructiveHint: new(false), IdempotentHint: true, OpenWorldHint: new(false)}
		mcp.AddTool(srv, &mcp.Tool{Name: PinTool, Title: "Pin a message", Description: s.pinDescription(),
			InputSchema: pinIn, Annotations: writes}, s.pin)
	}
	return srv, nil
}

// instructions is what the server tells the client about itself.
func (s *server) instructions() string {
	return "Compactor keeps this agent's conversation inside its context window: older messages are summarized, " +
		"and the raw messages stay stored. When a detail the summary dropped matters (exact file contents, command " +
		"output, error text, ids, numbers), call recall with a query or a sequence range instead of guessing; status " +
		"says which sequences the summary covers and where the verbatim tail starts." + s.pinInstructions() + s.whichConversation()
}

// pinInstructions tells the client about the pin tool, when it is listed.
func (s *server) pinInstructions() string {
	if !s.cfg.AllowPin {
		return ""
	}
	return fmt.Sprintf(" To keep a message verbatim through every later compaction, call pin with its seq (at most %d per conversation).", policy.MaxPins)
}

// whichConversation is the tools' rule for their conversation argument, as a sentence.
func (s *server) whichConversation() string {
	switch {
	case s.cfg.Conversation != "" && s.cfg.AnyConversation:
		return fmt.Sprintf(" The conversation is %s unless a call names another.", s.cfg.Conversation)
	case s.cfg.Conversation != "":
		return fmt.Sprintf(" This server serves conversation %s only: leave the conversation argument out.", s.cfg.Conversation)
	}
	return " Name the conversation in every call."
}

func (s *server) recallDescription() string {
	return fmt.Sprintf("Recall raw messages of this conversation that were summarized away or that you need verbatim: "+
		"exact file contents, command output, error text, ids, numbers. The summary says which sequence range it covers "+
		"(status too). Search by text (case-insensitive substring) and/or by sequence range. Returns messages (each with "+
		"its sequence number seq), newest first, a tool call always together with its results, within max_tokens (at most %d); "+
		"cut_by_budget and skipped_seqs say what did not fit (recall that range again, or with a larger max_tokens); "+
		"scan_complete false means older messages were not searched (ask again with to_seq below scanned_from_seq). "+
		"Secrets (keys, tokens, passwords) are redacted.%s", s.cfg.maxTokens(), s.whichConversation())
}

func (s *server) statusDescription() string {
	return "The conversation's compaction state: generation (how many compactions), tokens before and after the last one " +
		"and in the context now, which sequences the summary covers (covered_through_seq: recall them), where the verbatim " +
		"tail starts (tail_start_seq), when it was last compacted, and which messages are pinned." + s.whichConversation()
}

// conversationDescription describes a tool's conversation argument.
func (s *server) conversationDescription() string {
	switch {
	case s.cfg.Conversation != "" && s.cfg.AnyConversation:
		return fmt.Sprintf("The conversation id; left out: %s.", s.cfg.Conversation)
	case s.cfg.Conversation != "":
		return fmt.Sprintf("Leave out: this server serves conversation %s only, and refuses any other.", s.cfg.Conversation)
	}
	return "The conversation id (required: this server is bound to none)."
}

// conversationSchema is the schema of T with the conversation argument described for
// this server's rule.
func (s *server) conversationSchema(schemaOf func(*jsonschema.ForOptions) (*jsonschema.Schema, error)) (*jsonschema.Schema, error) {
	sc, err := schemaOf(nil)
	if err != nil {
		return nil, err
	}
	p := sc.Properties["conversation"]
	if p == nil {
		return nil, errors.New("schema without a conversation property")
	}
	p.Description = s.conversationDescription()
	p.Pattern = "^[A-Za-z0-9_-]+$"
	if s.cfg.Conversation == "" {
		sc.Required = append(sc.Required, "conversation")
	}
	return sc, nil
}

// recallSchema is RecallArgs' schema with the bounds of a recall.
func (s *server) recallSchema() (*jsonschema.Schema, error) {
	sc, err := s.conversationSchema(jsonschema.For[RecallArgs])
	if err != nil {
		return nil, err
	}
	zero, most := 0.0, float64(schemas.MaxRecallMaxTokens)
	for _, k := range []string{"from_seq", "to_seq", "max_tokens"} {
		sc.Properties[k].Minimum = &zero
	}
	sc.Properties["max_tokens"].Maximum = &most
	sc.Properties["max_tokens"].Description = fmt.Sprintf("Budget of the answer in tokens; 0 or left out: %d. Over this server's cap (%d) "+
		"the cap applies, and asked_max_tokens then says what you asked.", min(schemas.DefaultRecallMaxTokens, s.cfg.maxTokens()), s.cfg.maxTokens())
	n := schemas.MaxRecallQueryBytes
	sc.Properties["query"].MaxLength = &n
	return sc, nil
}

// conversation is the conversation a call reads: the one it names, or the bound one.
func (s *server) conversation(named string) (string, error) {
	switch {
	case named == "" && s.cfg.Conversation == "":
		return "", errors.New("name the conversation: this server is bound to none (the conversation argument)")
	case named == "" || named == s.cfg.Conversation:
		return s.cfg.Conversation, nil
	case !s.cfg.AnyConversation:
		return "", fmt.Errorf("refused: this server serves conversation %s only, not %s (leave the conversation argument out)",
			s.cfg.Conversation, named)
	}
	if err := schemas.ValidateConversationID(named); err != nil {
		return "", err
	}
	return named, nil
}

// mustExist fails with a tool error when conv has nothing stored: unknown, or forgotten.
func (s *server) mustExist(ctx context.Context, conv string) error {
	ok, err := s.cl.Exists(ctx, conv)
	if err != nil {
		return fmt.Errorf("read %s: %w", conv, err)
	}
	if ok {
		return nil
	}
	if s.tombs == nil {
		return fmt.Errorf("conversation %s not found: nothing was published to it, or it was forgotten", conv)
	}
	tomb, err := s.tombs.Forgotten(ctx, conv)
	if err != nil {
		return fmt.Errorf("conversation %s not found, and whether it was forgotten cannot be read: %w", conv, err)
	}
	if tomb != nil {
		return fmt.Errorf("conversation %s was forgotten at %s: its messages were deleted for good and cannot be recalled",
			conv, tomb.ForgottenAt.UTC().Format(time.RFC3339))
	}
	return fmt.Errorf("conversation %s not found: nothing was published to it (check the id)", conv)
}

// StoreTombstones reads tombstones from st, reporting a refusal of the server on nc
// at once as a *jetstream.PermissionError (a refused read gets no answer).
func StoreTombstones(nc *nats.Conn, st *jetstream.Store) Tombstones { return storeTombstones{nc, st} }

type storeTombstones struct {
	nc *nats.Conn
	st *jetstream.Store
}

func (t storeTombstones) Forgotten(ctx context.Context, conv string) (*schemas.Tombstone, error) {
	rctx, cancel := jetstream.RefusedContext(ctx, t.nc, nil)
	defer cancel()
	tomb, err := t.st.Forgotten(rctx, conv)
	return tomb, jetstream.PermissionCause(rctx, err)
}

package openai

import (
	"testing"

	"github.com/compactor/compactor/internal/proxy/wire/wiretest"
)

// An answer of the proxy's own reads back, whole and streamed, as the reply it holds.
func TestAnswerReadsBackAsTheReply(t *testing.T) { wiretest.AnswerReadsBack(t, OpenAI()) }

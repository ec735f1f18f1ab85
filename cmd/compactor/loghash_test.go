package main

import (
	"os"
	"strings"
	"testing"
)

// COMPACTOR_LOG_HASH_IDS makes the process's logger write a keyed hash of a
// conversation id, never the id; without a key of 16 bytes it refuses to start.
func TestLogHashIDsHashesConversationIDsInLogs(t *testing.T) {
	testEnv(t, 128000) // clears the environment
	t.Setenv("COMPACTOR_LOG_HASH_IDS", "true")
	t.Setenv("COMPACTOR_LOG_HASH_KEY", "short")
	err := run(t.Context(), []string{"serve"}, stdio{in: strings.NewReader(""), out: &strings.Builder{}, err: &strings.Builder{}}, os.LookupEnv)
	if err == nil || !strings.Contains(err.Error(), "LOG_HASH_KEY") {
		t.Fatalf("got %v; want an error naming COMPACTOR_LOG_HASH_KEY", err)
	}
	t.Setenv("COMPACTOR_LOG_HASH_KEY", "a-deployment-secret-key")
	env, err := loadEnv(os.LookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"json", "console"} {
		env.LogFormat = format
		var out strings.Builder
		log := newLogger(env, &out)
		log.Info().Str("conversation", "user-jane-doe").Msg("compacted user-jane-doe")
		if strings.Contains(out.String(), "user-jane-doe") || !strings.Contains(out.String(), env.idHasher().Hash("user-jane-doe")) {
			t.Fatalf("%s log line: %s; want the hash, not the id", format, out.String())
		}
	}
}

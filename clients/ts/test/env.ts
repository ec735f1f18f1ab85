// What the tests need from their environment: the servers the Go tests TestTSClient and
// TestTSClientUnderRoles (internal/systemtest/tsclient_test.go) start, passed in as these
// variables. `npm test` runs those Go tests (tools/test.ts); a test run without them
// fails, naming what to run, and never skips.

/** The value of the environment variable name; it throws when the variable is unset. */
export function need(name: string): string {
  const v = process.env[name];
  if (v) return v;
  throw new Error(`${name} is not set: this test needs the servers that \`npm test\` starts (it runs go test -run '^TestTSClient' ./internal/systemtest); run npm test, not node --test alone`);
}

/** A conversation id no other test uses. */
export function convId(name: string): string {
  return `${name}-${Math.random().toString(36).slice(2, 10)}`;
}

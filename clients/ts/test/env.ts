// What the tests need from their environment. The Go test TestTSClient
// (cmd/compactor/tsclient_test.go) starts the servers and sets these variables; run
// alone, a test that needs a server skips, unless CI=true: then it fails, so CI never
// passes without running it.

import type { TestContext } from "node:test";

export function need(t: TestContext, name: string): string | undefined {
  const v = process.env[name];
  if (v) return v;
  if (process.env["CI"] === "true") throw new Error(`${name} is not set: run these tests through go test -run TestTSClient ./cmd/compactor`);
  t.skip(`${name} is not set (go test -run TestTSClient ./cmd/compactor sets it)`);
  return undefined;
}

/** A conversation id no other test uses. */
export function convId(name: string): string {
  return `${name}-${Math.random().toString(36).slice(2, 10)}`;
}

// The client under the users of deploy/nats/accounts.conf (NATS_ROLES_URL, passwords in
// NATS_<USER>_PASSWORD, set by the Go test TestTSClientUnderRoles): each user on its own
// inbox prefix does its job; what its role may not do is refused.

import assert from "node:assert/strict";
import { test, type TestContext } from "node:test";
import { Compactor, PermissionError, type Message } from "../src/index.js";
import { convId, need } from "./env.js";

async function as(t: TestContext, user: string, prefix = true): Promise<Compactor> {
  const url = need("NATS_ROLES_URL");
  const c = await Compactor.connect({
    servers: url,
    user,
    pass: process.env[`NATS_${user.toUpperCase()}_PASSWORD`] ?? "",
    inboxPrefix: prefix ? `_INBOX_${user}` : undefined,
    timeoutMs: 3000,
  });
  t.after(() => c.close());
  return c;
}

// The server refuses the subject: nats.js hands the violation to the request (or the
// inbox subscription) that caused it, so the refusal comes at once, not as a timeout.
const refused = (e: unknown) => e instanceof PermissionError;

test("the producer publishes, reads and forgets; the reader reads", async (t) => {
  const producer = await as(t, "producer");
  const reader = await as(t, "reader");
  const conv = convId("ts-roles");
  const msgs: Message[] = [
    { role: "user", content: "NEEDLE-roles run the build" },
    { role: "assistant", content: null, tool_calls: [{ id: "r1", type: "function", function: { name: "make", arguments: "{}" } }] },
    // Over the server's 16 KiB max payload: stored as an object, which producers may write.
    { role: "tool", tool_call_id: "r1", content: "log line\n".repeat(2000) },
    { role: "assistant", content: "built" },
  ];
  const acks = await producer.publishAll(conv, msgs);
  const mine = await producer.context(conv, { atLeastSeq: acks[3]!.seq });
  assert.deepStrictEqual(mine.messages, msgs);
  const theirs = await reader.context(conv, { atLeastSeq: acks[3]!.seq });
  assert.deepStrictEqual(theirs.messages, msgs);
  await assert.rejects(reader.publish(conv, { role: "user", content: "not allowed" }), refused);
  // Both may recall raw messages through the service.
  for (const c of [producer, reader]) {
    const r = await c.recall(conv, { query: "needle-ROLES" });
    assert.deepStrictEqual(r.messages.map((m) => m.seq), [acks[0]!.seq]);
  }
  await assert.rejects(producer.compact(conv), refused, "compactor.compact is not the producer's");
  await assert.rejects(reader.forget(conv), refused, "the reader may not forget");
  const gone = await producer.forget(conv);
  assert.equal(gone.deleted.chat_messages, 4);
  assert.equal(gone.deleted.objects, 1);
  assert.deepStrictEqual((await reader.context(conv)).messages, []);
});

test("without its inbox prefix a user gets no replies", async (t) => {
  const reader = await as(t, "reader", false);
  await assert.rejects(reader.context(convId("ts-roles-inbox")), refused);
});

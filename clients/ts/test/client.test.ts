// The client against a running Compactor: the Go test TestTSClient starts an embedded
// server with the compactor's roles (NATS_URL), one whose fake LLM answers after a delay
// (NATS_HELD_URL), and a provisioned server with a 16 KiB max payload and no compactor
// (NATS_SMALL_URL).

import assert from "node:assert/strict";
import { test } from "node:test";
import {
  ANSWER_RECALL_MAX_TOKENS,
  DEFAULT_RECALL_MAX_TOKENS,
  BusyError,
  checkPairs,
  Compactor,
  InvalidError,
  NoServiceError,
  NotFoundError,
  offload,
  PublishBatchError,
  ToolResultWithoutCallError,
  TooLargeError,
  type BatchMessage,
  type Message,
} from "../src/index.js";
import { createHash } from "node:crypto";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { Objm } from "@nats-io/obj";
import { connect, headers } from "@nats-io/transport-node";
import { convId, need } from "./env.js";

async function client(t: import("node:test").TestContext, env: string, opts = {}): Promise<Compactor> {
  const url = need(env);
  const c = await Compactor.connect({ servers: url, ...opts });
  t.after(() => c.close());
  return c;
}

const call = (id: string, name: string) => ({ id, type: "function" as const, function: { name, arguments: "{}" } });

test("publish and read your own writes", async (t) => {
  const c = await client(t, "NATS_URL");
  const conv = convId("ts-rw");
  const a = await c.publish(conv, { role: "system", content: "You are terse." });
  const b = await c.publish(conv, { role: "user", content: "Hi", meta: { pin: "true" }, tokens: 3 });
  assert.equal(b.seq > a.seq, true);
  assert.notEqual(a.msgId, b.msgId, "every message gets its own id");
  const cx = await c.context(conv, { atLeastSeq: b.seq });
  assert.deepStrictEqual(cx.messages, [
    { role: "system", content: "You are terse." },
    { role: "user", content: "Hi" },
  ]);
  assert.deepStrictEqual(cx.seqs, [a.seq, b.seq]);
  assert.equal(cx.tokens, 4 + 4 + 3);
  const raw = await c.context(conv, { format: "raw" });
  assert.deepStrictEqual(raw.messages[1], { role: "user", content: "Hi", tokens: 3, meta: { pin: "true" } });
});

test("a retry with the same msgId is stored once", async (t) => {
  const c = await client(t, "NATS_URL");
  const conv = convId("ts-dup");
  const first = await c.publish(conv, { role: "user", content: "once" }, { msgId: `${conv}-1` });
  const again = await c.publish(conv, { role: "user", content: "once" }, { msgId: `${conv}-1` });
  assert.deepStrictEqual(again, { seq: first.seq, msgId: `${conv}-1`, duplicate: true });
  const all = await c.publishAll(conv, [
    { role: "assistant", content: "two" },
    { role: "user", content: "three" },
  ]);
  const cx = await c.context(conv, { atLeastSeq: all[1]!.seq });
  assert.deepStrictEqual(
    cx.messages.map((m) => m.content),
    ["once", "two", "three"],
  );
});

test("tool results must answer an open call", async (t) => {
  const c = await client(t, "NATS_URL");
  const conv = convId("ts-pairs");
  await c.publish(conv, { role: "user", content: "look around" });
  await c.publish(conv, { role: "assistant", content: null, tool_calls: [call("c1", "ls"), call("c2", "pwd")] });
  await assert.rejects(c.publish(conv, { role: "tool", tool_call_id: "nope", content: "x" }), ToolResultWithoutCallError);
  const r1 = await c.publish(conv, { role: "tool", tool_call_id: "c1", content: "a b" }, { msgId: `${conv}-c1` });
  const again = await c.publish(conv, { role: "tool", tool_call_id: "c1", content: "a b" }, { msgId: `${conv}-c1` });
  assert.equal(again.duplicate, true, "a retry of a stored result goes to the stream, which de-duplicates it");
  await assert.rejects(c.publish(conv, { role: "tool", tool_call_id: "c1", content: "again" }), (e: ToolResultWithoutCallError) => e.answered);
  // Another client (another process) did not see the call: it reads the stream.
  const other = new Compactor(c.nc);
  const r2 = await other.publish(conv, { role: "tool", tool_call_id: "c2", content: "/w" });
  await assert.rejects(other.publish(conv, { role: "tool", tool_call_id: "c2", content: "/w" }), ToolResultWithoutCallError);
  const cx = await c.context(conv, { atLeastSeq: r2.seq });
  assert.equal(cx.messages.length, 4);
  assert.equal(checkPairs(cx.messages), null);
  assert.ok(r1.seq < r2.seq);
});

test("publishBatch stores each conversation in order, names its first failure, and stores nothing twice when published again", async (t) => {
  const c = await client(t, "NATS_URL");
  const convs = [convId("ts-batch-a"), convId("ts-batch-b"), convId("ts-batch-c")];
  const per = convs.map((conv) =>
    [0, 1, 2].flatMap((r): Message[] => [
      { role: "user", content: `question ${r} of ${conv}` },
      { role: "assistant", content: null, tool_calls: [call(`${conv}-${r}-a`, "ls"), call(`${conv}-${r}-b`, "pwd")] },
      { role: "tool", tool_call_id: `${conv}-${r}-b`, content: "/w" },
      { role: "tool", tool_call_id: `${conv}-${r}-a`, content: "a b" },
      { role: "assistant", content: `answer ${r}` },
    ]),
  );
  const batch: BatchMessage[] = [];
  per[0]!.forEach((_, i) => convs.forEach((conv, k) => batch.push({ conv, message: per[k]![i]!, msgId: `${conv}-${i}` })));
  const at = 20;
  const good = batch[at]!.message;
  batch[at]!.message = { role: "user" } as Message; // no content: refused
  const err = await c.publishBatch(batch, { window: 4 }).then(
    () => assert.fail("a batch with an invalid message was stored whole"),
    (e: unknown) => e as PublishBatchError,
  );
  assert.ok(err instanceof PublishBatchError, String(err));
  assert.equal(err.index, at);
  assert.equal(err.conv, batch[at]!.conv);
  assert.ok(err.cause instanceof InvalidError);
  err.results.forEach((r, i) => assert.equal(r !== undefined, i < at, `message ${i}`));
  assert.equal(err.results.length, batch.length);

  batch[at]!.message = good;
  const all = await c.publishBatch(batch, { window: 3 });
  for (let i = 0; i < at; i++) {
    assert.deepStrictEqual(all[i], { ...err.results[i]!, duplicate: true }, `message ${i} stored again`);
  }
  for (const [k, conv] of convs.entries()) {
    const seqs = batch.flatMap((b, i) => (b.conv === conv ? [all[i]!.seq] : []));
    assert.deepStrictEqual(seqs, [...seqs].sort((x, y) => x - y), `${conv}: sequences in batch order`);
    const cx = await c.context(conv, { format: "raw", atLeastSeq: Math.max(...seqs) });
    assert.deepStrictEqual(cx.messages, per[k]);
    assert.deepStrictEqual(cx.seqs, seqs);
  }
});

test("bad input is refused before anything is sent", async (t) => {
  const c = await client(t, "NATS_URL");
  const conv = convId("ts-bad");
  const cases: Array<[string, string, () => Promise<unknown>]> = [
    ["an id with a dot", "conversation", () => c.publish("a.b", { role: "user", content: "x" })],
    ["a wildcard id", "conversation", () => c.context("*")],
    ["an unknown role", "role", () => c.publish(conv, { role: "robot" as "user", content: "x" })],
    ["a lone surrogate", "content", () => c.publish(conv, { role: "user", content: "bad \ud800" })],
    ["a stub", "content_ref", () => c.publish(conv, { role: "user", content: "x", content_ref: { bucket: "b", name: `${conv}/${"0".repeat(64)}`, size: 20, sha256: "0".repeat(64), tokens: 1 } })],
    ["tool calls on a user message", "tool_calls", () => c.publish(conv, { role: "user", content: "x", tool_calls: [call("q", "f")] })],
    ["a fraction as tokens", "tokens", () => c.publish(conv, { role: "user", content: "x", tokens: 1.5 })],
    ["an infinite number", "tokens", () => c.publish(conv, { role: "user", content: "x", tokens: Infinity })],
    ["a negative wait", "wait_ms", () => c.compact(conv, { waitMs: -1 })],
    ["a bad request id", "request_id", () => c.compact(conv, { requestId: "a b" })],
    ["a policy value that is no string or number", "set.threshold", () => c.policy.set(conv, { threshold: true as unknown as number })],
  ];
  for (const [what, field, op] of cases) {
    await assert.rejects(op, (e: InvalidError) => e instanceof InvalidError && e.field === field, what);
  }
  assert.equal(await c.value(conv), null, "nothing was stored");
});

test("compact, status, policy and forget through the service", async (t) => {
  const c = await client(t, "NATS_URL");
  const conv = convId("ts-service");
  const msgs: Message[] = [];
  for (let i = 0; i < 30; i++) {
    msgs.push({ role: "user", content: `request ${i} NEEDLE-ts${i}: ${"details of what I want. ".repeat(4)}` });
    msgs.push({ role: "assistant", content: `done ${i}` });
  }
  const acks = await c.publishAll(conv, msgs);
  const last = acks[acks.length - 1]!.seq;
  const p = await c.policy.set(conv, { keep_last_n: 6 });
  assert.equal(p.policy?.["keep_last_n"], "6");
  assert.equal(p.settings["keep_last_n"], 6);
  await assert.rejects(c.policy.set(conv, { bogus: 1 }), (e: InvalidError) => e instanceof InvalidError && e.field === "set.bogus");
  const r = await c.compact(conv, { instructions: "keep every NEEDLE", waitMs: 30_000 });
  assert.equal(r.status, "completed", JSON.stringify(r));
  assert.equal(r.result?.conversation, conv);
  const st = await c.status(conv);
  assert.equal(st.last_seq, last);
  assert.equal(st.value?.generation, r.result?.generation);
  const cx = await c.context(conv);
  assert.equal(cx.hasSummary, true);
  assert.equal(cx.generation, r.result?.generation);
  assert.match(cx.messages[0]!.content as string, /NEEDLE-ts0/, "the fake LLM kept the needles");
  assert.equal(cx.messages.length, 1 + 6);
  const pointer = await c.contextPointer(conv);
  assert.equal(pointer.tail_start_seq, cx.tailStartSeq);
  const overall = await c.status();
  assert.equal(typeof overall, "object");
  assert.deepStrictEqual((await c.policy.clear(conv)).policy, {});
  const gone = await c.forget(conv);
  assert.equal(gone.deleted.chat_messages, msgs.length);
  const after = await c.context(conv);
  assert.deepStrictEqual([after.messages, after.generation], [[], 0]);
});

test("busy: a second request while one is pending is not queued", async (t) => {
  const c = await client(t, "NATS_HELD_URL");
  const conv = convId("ts-busy");
  const msgs: Message[] = [];
  // The first messages are long, so that summarizing them shrinks the context.
  for (let i = 0; i < 26; i++) {
    msgs.push({ role: i % 2 ? "assistant" : "user", content: `turn ${i} NEEDLE-b${i} ${i < 6 ? "context ".repeat(50) : ""}` });
  }
  await c.publishAll(conv, msgs);
  const first = await c.compact(conv, { instructions: "first" });
  assert.equal(first.status, "queued");
  const busy = await c.compact(conv, { instructions: "second" }).then(
    () => assert.fail("the second request was queued"),
    (e: unknown) => e,
  );
  assert.ok(busy instanceof BusyError, String(busy));
  assert.equal(busy.pendingRequestId, first.request_id);
  assert.match(busy.message, /NOT queued/);
  // A read that waits for the pending compaction sees its result.
  const cx = await c.context(conv, { waitPendingMs: 60_000 });
  assert.equal(cx.generation, 1);
  const ev = await c.waitForOutcome(conv, first.request_id!, { timeoutMs: 10_000 });
  assert.equal(ev.type, "completed");
});

test("messages over the max payload are stored as objects and read back whole", async (t) => {
  const c = await client(t, "NATS_SMALL_URL");
  const conv = convId("ts-large");
  const big = "NEEDLE-head " + "línea del registro de compilación\n".repeat(1500) + " NEEDLE-tail";
  const msgs: Message[] = [
    { role: "user", content: "build it" },
    { role: "assistant", content: null, tool_calls: [call("b1", "make")] },
    { role: "tool", tool_call_id: "b1", content: big, reasoning: "checked", extra: { sig: "abc==" }, "x-trace": { id: 7 } },
    { role: "assistant", content: "built" },
  ];
  const acks = await c.publishAll(conv, msgs.slice(0, 3));
  const again = await c.publish(conv, msgs[2]!, { msgId: acks[2]!.msgId });
  assert.deepStrictEqual(again, { ...acks[2], duplicate: true }, "a retry stores neither the message nor the object twice");
  const last = await c.publish(conv, msgs[3]!);
  const cx = await c.context(conv, { atLeastSeq: last.seq });
  assert.deepStrictEqual(cx.skipped, []);
  assert.deepStrictEqual(cx.messages, msgs);
  const raw = await c.context(conv, { format: "raw" });
  assert.equal(raw.messages[2]!.content_ref, undefined, "the stub is restored");
  // Too large even without its content: refused, naming the limit; nothing stored.
  const huge: Message = { role: "assistant", content: null, tool_calls: [{ id: "x", type: "function", function: { name: "patch", arguments: "+".repeat(40_000) } }] };
  await assert.rejects(c.publish(conv, huge), (e: Error) => e instanceof TooLargeError && /max_payload 16384/.test(e.message));
  assert.equal((await c.context(conv)).messages.length, 4);
});

test("a message over the max payload published while its conversation is forgotten keeps its object", async (t) => {
  const c = await client(t, "NATS_SMALL_URL");
  const conv = convId("ts-forget-large");
  const big: Message = { role: "user", content: "NEEDLE-head " + "a pasted log line\n".repeat(2000) + " NEEDLE-tail" };
  const first = await c.publish(conv, big);
  // A forget that runs between the object's store (the same content: found stored) and
  // the stub's publish: what it leaves, as compactor.forget does it, with no compactor
  // here: the object deleted, the conversation's tombstone written.
  const nc = await connect({ servers: need("NATS_SMALL_URL") });
  t.after(() => nc.close());
  const forget = async () => {
    const bucket = "compaction-objects";
    const name = offload(big, conv, bucket).ref.name;
    const info = await (await new Objm(nc).open(bucket)).info(name);
    const jsm = await jetstreamManager(nc);
    const b64 = Buffer.from(name).toString("base64url");
    for (const filter of [`$O.${bucket}.C.${info!.nuid}`, `$O.${bucket}.M.${b64}${"=".repeat((4 - (b64.length % 4)) % 4)}`]) {
      await jsm.streams.purge(`OBJ_${bucket}`, { filter });
    }
    const key = createHash("sha256").update(conv, "utf8").digest("hex");
    await (await new Kvm(nc).open("compaction-forgotten")).put(key, JSON.stringify({ through_seq: first.seq, forgotten_at: new Date().toISOString() }));
  };
  const store = (c as unknown as { store: { publish: (...a: unknown[]) => Promise<unknown> } }).store;
  const publish = store.publish.bind(store);
  store.publish = async (...a: unknown[]) => {
    store.publish = publish;
    await forget();
    return publish(...a);
  };
  const again = await c.publish(conv, big);
  const cx = await c.context(conv, { atLeastSeq: again.seq });
  assert.deepStrictEqual(cx.skipped, [], "the new message's object is stored again after the forget");
  assert.deepStrictEqual(cx.messages.at(-1), big);
});

test("a forget that covers a large message's stub keeps its object deleted", async (t) => {
  const c = await client(t, "NATS_SMALL_URL");
  const conv = convId("ts-forget-covers");
  const big: Message = { role: "user", content: "NEEDLE-head " + "a pasted log line\n".repeat(2000) + " NEEDLE-tail" };
  const bucket = "compaction-objects";
  const name = offload(big, conv, bucket).ref.name;
  const nc = await connect({ servers: need("NATS_SMALL_URL") });
  t.after(() => nc.close());
  const os = await new Objm(nc).open(bucket);
  // A forget that runs once the stub is stored, before the client checks its object:
  // what compactor.forget leaves, with no compactor here: the object deleted, the
  // tombstone written through the stub.
  const forget = async (through: number) => {
    const info = await os.info(name);
    const jsm = await jetstreamManager(nc);
    const b64 = Buffer.from(name).toString("base64url");
    for (const filter of [`$O.${bucket}.C.${info!.nuid}`, `$O.${bucket}.M.${b64}${"=".repeat((4 - (b64.length % 4)) % 4)}`]) {
      await jsm.streams.purge(`OBJ_${bucket}`, { filter });
    }
    const key = createHash("sha256").update(conv, "utf8").digest("hex");
    await (await new Kvm(nc).open("compaction-forgotten")).put(key, JSON.stringify({ through_seq: through, forgotten_at: new Date().toISOString() }));
  };
  const store = (c as unknown as { store: { publish: (...a: unknown[]) => Promise<{ seq: number }> } }).store;
  const publish = store.publish.bind(store);
  store.publish = async (...a: unknown[]) => {
    store.publish = publish;
    const out = await publish(...a);
    await forget(out.seq);
    return out;
  };
  await c.publish(conv, big);
  assert.equal(await os.info(name), null, "the object of a forgotten message is not stored again");
});

test("a description written over an object's does not hide it, and roll-ups are refused", async (t) => {
  const c = await client(t, "NATS_SMALL_URL");
  const conv = convId("ts-overwritten");
  const big: Message = { role: "user", content: "NEEDLE-head " + "a pasted log line\n".repeat(2000) + " NEEDLE-tail" };
  const ack = await c.publish(conv, big);
  const bucket = "compaction-objects";
  const name = offload(big, conv, bucket).ref.name;
  const b64 = Buffer.from(name).toString("base64url");
  const meta = `$O.${bucket}.M.${b64}${"=".repeat((4 - (b64.length % 4)) % 4)}`;
  const nc = await connect({ servers: need("NATS_SMALL_URL") });
  t.after(() => nc.close());
  const js = jetstream(nc);
  const rollup = headers();
  rollup.set("Nats-Rollup", "sub");
  await assert.rejects(js.publish(meta, JSON.stringify({ name, bucket, deleted: true }), { headers: rollup }), /rollup/);
  await js.publish(meta, JSON.stringify({ name, bucket, deleted: true }));
  const cx = await c.context(conv, { atLeastSeq: ack.seq });
  assert.deepStrictEqual(cx.skipped, []);
  assert.deepStrictEqual(cx.messages, [big]);
});

test("no compactor service, no stream", async (t) => {
  const c = await client(t, "NATS_SMALL_URL");
  await assert.rejects(c.compact(convId("ts-nosvc")), NoServiceError);
  await assert.rejects(c.forget(convId("ts-nosvc")), NoServiceError);
  const renamed = new Compactor(c.nc, { names: { chatPrefix: "nochat" } });
  await assert.rejects(renamed.publish(convId("ts-nostream"), { role: "user", content: "x" }), NotFoundError);
});

test("a read-time budget cuts the context", async (t) => {
  const c = await client(t, "NATS_SMALL_URL");
  const conv = convId("ts-budget");
  await c.publishAll(conv, [
    { role: "user", content: "read the log" },
    { role: "assistant", content: null, tool_calls: [call("r1", "read_log")] },
    { role: "tool", tool_call_id: "r1", content: "x".repeat(4000) },
    { role: "assistant", content: "the log is fine" },
  ]);
  const full = await c.context(conv);
  const cut = await c.context(conv, { maxTokens: 300 });
  assert.equal(full.degraded, false);
  assert.equal(cut.degraded, true);
  assert.ok(cut.tokens <= 300, `${cut.tokens} tokens`);
  assert.match(cut.messages[2]!.content as string, /characters cut by Compactor/);
});

test("a 503 of the service (stopping, or no wait slot free) is a BusyError, as Go's pipeline.ErrBusy", async (t) => {
  const c = await client(t, "NATS_SMALL_URL");
  // A service instance that answers as pipeline/service does while it stops.
  const nc = await connect({ servers: need("NATS_SMALL_URL") });
  try {
    const sub = nc.subscribe(`${c.names.service}.compact`, {
      callback: (_err, m) => {
        const h = headers();
        h.set("Nats-Service-Error-Code", "503");
        h.set("Nats-Service-Error", "the compactor service is stopping; retry (another instance may answer)");
        m.respond(new Uint8Array(0), { headers: h });
      },
    });
    await nc.flush();
    await assert.rejects(
      c.compact(convId("ts-503")),
      (e: Error) => e instanceof BusyError && e.pendingRequestId === undefined && /stopping/.test(e.message),
      "Go maps this answer to ErrBusy (exit 4: try again later); no request is pending to wait for",
    );
    sub.unsubscribe();
  } finally {
    await nc.close();
  }
});

test("recall returns raw messages with their sequences, rounds whole, newest first", async (t) => {
  const c = await client(t, "NATS_URL");
  const conv = convId("ts-recall");
  const acks = await c.publishAll(conv, [
    { role: "user", content: "Open db.yaml" },
    { role: "assistant", content: null, tool_calls: [call("k1", "read_file"), call("k2", "stat")] },
    { role: "tool", tool_call_id: "k1", content: "host: db.internal\nport: 6432", meta: { private: "x" } },
    { role: "tool", tool_call_id: "k2", content: "644" },
    { role: "assistant", content: "Port 6432." },
  ]);
  const seqs = acks.map((a) => a.seq);
  const r = await c.recall(conv, { query: "DB.INTERNAL" });
  assert.deepStrictEqual(r.messages.map((m) => m.seq), [seqs[1], seqs[2], seqs[3]], "the matching result pulls in its call and the other result");
  assert.deepStrictEqual(r.messages[1], { seq: seqs[2], role: "tool", tool_call_id: "k1", content: "host: db.internal\nport: 6432" });
  assert.equal(r.matched, 3);
  assert.equal(r.cut_by_budget, false);
  assert.equal(r.scan_complete, true);
  const all = await c.recall(conv);
  assert.deepStrictEqual(all.messages.map((m) => m.seq), [seqs[4], seqs[1], seqs[2], seqs[3], seqs[0]]);
  const small = await c.recall(conv, { maxTokens: 20 });
  assert.deepStrictEqual(small.messages.map((m) => m.seq), [seqs[4], seqs[0]]);
  assert.deepStrictEqual(small.skipped_seqs, [seqs[1]]);
  const one = await c.recall(conv, { fromSeq: seqs[0], toSeq: seqs[0] });
  assert.deepStrictEqual(one.messages.map((m) => m.seq), [seqs[0]]);
  await assert.rejects(c.recall(conv, { fromSeq: 9, toSeq: 2 }), (e: unknown) => e instanceof InvalidError && e.field === "from_seq");
  await assert.rejects(c.recall(convId("ts-recall-ghost")), NotFoundError);
  const answer = JSON.parse(await c.answerRecall(conv, `{"query":"port 6432"}`));
  assert.deepStrictEqual(answer.messages.map((m: { seq: number }) => m.seq), [seqs[4]]);
  assert.deepStrictEqual(JSON.parse(await c.answerRecall(conv, `{"pattern":"x"}`)), {
    error: 'arguments: must be a JSON object of query, from_seq, to_seq and max_tokens (unknown field "pattern")',
  });
});

test("answerRecall caps what a model asks for and says what it asked; 0 is the default", async (t) => {
  const c = await client(t, "NATS_URL");
  const conv = convId("ts-recall-cap");
  const acks = await c.publishAll(conv, [0, 1, 2, 3, 4, 5].map((i) => ({ role: "user" as const, content: `${i} ${"w".repeat(6000)}` })));
  const seqs = acks.map((a) => a.seq);
  const answer = async (args: string, cap?: number) => JSON.parse(await c.answerRecall(conv, args, cap));
  const big = await answer(`{"max_tokens":1000000}`);
  assert.equal(big.max_tokens, ANSWER_RECALL_MAX_TOKENS);
  assert.equal(big.asked_max_tokens, 1000000);
  assert.equal(big.returned, 5);
  for (const args of ["{}", `{"max_tokens":0}`]) {
    const d = await answer(args);
    assert.equal(d.max_tokens, DEFAULT_RECALL_MAX_TOKENS, args);
    assert.equal(d.asked_max_tokens, undefined, args);
  }
  const capped = await answer(`{"max_tokens":5000}`, 2000);
  assert.deepStrictEqual([capped.max_tokens, capped.asked_max_tokens, capped.messages.map((m: { seq: number }) => m.seq)], [2000, 5000, [seqs[5]]]);
  const fits = await answer(`{"max_tokens":3000}`);
  assert.deepStrictEqual([fits.max_tokens, fits.asked_max_tokens], [3000, undefined]);
  assert.equal((await c.recall(conv, { maxTokens: 0 })).max_tokens, DEFAULT_RECALL_MAX_TOKENS);
  await assert.rejects(c.answerRecall(conv, "{}", -1), InvalidError);
});

test("recall without a compactor service says so", async (t) => {
  const c = await client(t, "NATS_SMALL_URL", { timeoutMs: 2000 });
  await assert.rejects(c.recall(convId("ts-recall-nosvc")), NoServiceError);
});

test("a value a forget covers is not served: a late value of an old generation", async (t) => {
  const c = await client(t, "NATS_URL");
  const conv = convId("ts-late");
  await c.publishAll(conv, [
    { role: "user", content: "old one" },
    { role: "assistant", content: "old two" },
  ]);
  const gone = await c.forget(conv);
  // What a worker that outlived the forget (its check gave up, or it crashed before it)
  // would have written after the tombstone: a value built on the forgotten conversation.
  const nc = await connect({ servers: need("NATS_URL") });
  t.after(() => nc.close());
  const kv = await new Kvm(nc).open("compaction");
  const late = {
    schema_version: 1, conversation: conv, generation: 3, summary: "FORGOTTEN SUMMARY", tail_start_seq: gone.through_seq,
    covered_through_seq: gone.through_seq - 1, first_seq: 1, created_at: new Date().toISOString(),
    llm_base_generation: 0, fallback: false, tokens_before: 0, tokens_after: 0, messages_before: 0, messages_after: 0,
  };
  await kv.put(conv, JSON.stringify(late));
  const fresh = await c.publish(conv, { role: "user", content: "new one" });
  for (const atLeastSeq of [0, fresh.seq]) {
    const cx = await c.context(conv, { atLeastSeq });
    assert.deepStrictEqual([cx.messages, cx.generation], [[{ role: "user", content: "new one" }], 0], `atLeastSeq ${atLeastSeq}`);
  }
  assert.equal(await c.value(conv), null);
});

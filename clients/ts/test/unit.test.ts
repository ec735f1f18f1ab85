// The pure parts of the client, without a server.

import assert from "node:assert/strict";
import { test } from "node:test";
import {
  assemble,
  checkPairs,
  connectOptionsFromEnv,
  decodeMessage,
  decodeRecallArguments,
  decodeValue,
  estimateTokens,
  floorTokens,
  InvalidError,
  messageTokens,
  NewerSchemaError,
  ObjectGap,
  offload,
  RECALL_TOOL,
  restore,
  summaryText,
  SUMMARY_PREFIX,
  truncate,
  validateConversationId,
  type Message,
} from "../src/index.js";
import { readdirSync, readFileSync } from "node:fs";
import { badUTF8, intFromText, rawElements, rawMembers, runeCount, utf8Bytes } from "../src/json.js";
import { checkMessage, checkMessageEncoded, decodeMessageText, encodeMessage } from "../src/message.js";
import { errors as nats } from "@nats-io/transport-node";
import { CompactorError, NotFoundError, PermissionError, TimeoutError } from "../src/errors.js";
import { mapNatsError, noResponders } from "../src/store.js";

const bytes = (s: string) => new TextEncoder().encode(s);

test("truncate counts code points, as Go counts runes", () => {
  assert.deepStrictEqual(truncate("😀😀abc😀😀", 2, 2, ""), ["😀😀\n[… 3 characters cut by Compactor …]\n😀😀", true]);
  assert.deepStrictEqual(truncate("short", 3, 3, "x"), ["short", false]);
  assert.deepStrictEqual(truncate("abcdef", -1, 2, "n"), ["\n[… 4 characters cut by Compactor: n …]\nef", true]);
  assert.equal(runeCount("a😀é"), 3);
});

test("UTF-8 is checked as Go checks it", () => {
  assert.equal(badUTF8(bytes("héllo ✓ 😀")), -1);
  assert.equal(badUTF8(new Uint8Array([0x61, 0xff])), 1);
  assert.equal(badUTF8(new Uint8Array([0xed, 0xa0, 0x80])), 0, "an encoded surrogate");
  assert.equal(badUTF8(new Uint8Array([0xc0, 0xaf])), 0, "an overlong encoding");
  assert.equal(badUTF8(new Uint8Array([0x61, 0xe2, 0x82])), 1, "a truncated sequence");
  assert.throws(() => decodeMessage(new Uint8Array([0x7b, 0xff])), /not valid UTF-8 \(first bad byte at offset 1\)/);
});

test("integers are read from their text", () => {
  assert.equal(intFromText("42", false), 42);
  assert.equal(intFromText("-0", false), 0);
  for (const bad of ["1.0", "1e3", "-1"]) assert.throws(() => intFromText(bad, true), Error, bad);
  assert.equal(intFromText("9007199254740993", false), 9007199254740992, "the nearest number, as JSON.parse reads it");
  assert.throws(() => intFromText("9223372036854775808", false), /out of range/);
});

test("conversation ids follow the rule", () => {
  validateConversationId("a-B_9");
  for (const bad of ["", "a.b", "*", ">", "a b", "é", "x".repeat(129)]) {
    assert.throws(() => validateConversationId(bad), (e: InvalidError) => e instanceof InvalidError && e.field === "conversation", bad);
  }
});

test("a message handed to publish comes out canonical", () => {
  const m = checkMessage({ role: "user", content: "hi", name: "", reasoning: undefined, extra: { b: 1 }, meta: {}, Foo: [1] });
  assert.deepStrictEqual(m, { role: "user", content: "hi", extra: { b: 1 }, Foo: [1] });
  const own = checkMessage(JSON.parse('{"role":"user","content":"x","__proto__":{"polluted":true}}'));
  assert.equal(({} as Record<string, unknown>)["polluted"], undefined);
  assert.deepStrictEqual(Object.getPrototypeOf(own), Object.prototype);
  assert.deepStrictEqual(Object.keys(own), ["role", "content", "__proto__"]);
  assert.throws(() => checkMessage({ role: "user", content: "x", tokens: 10n }), InvalidError);
  const cyclic: Record<string, unknown> = { role: "user", content: "x" };
  cyclic["extra"] = cyclic;
  assert.throws(() => checkMessage(cyclic), /cycle/);
});

test("a value of a newer schema is refused with its version", () => {
  assert.throws(
    () => decodeValue('{"schema_version":3,"conversation":"c"}', "c"),
    (e: NewerSchemaError) => e instanceof NewerSchemaError && e.version === 3,
  );
  assert.throws(() => decodeValue('{"schema_version":1,"conversation":"c","tail_start_seq":2,"created_at":"yesterday"}', "c"), /created_at/);
  const v = decodeValue('{"schema_version":1,"conversation":"c","tail_start_seq":2,"covered_through_seq":1,"future_field":{"x":1}}', "c");
  assert.deepStrictEqual(v.value["future_field"], { x: 1 }, "unknown fields are kept");
});

test("a repair's fields are checked as Go decodes them", () => {
  const head = '{"schema_version":1,"conversation":"c","tail_start_seq":2,"covered_through_seq":1';
  const v = decodeValue(`${head},"generation":3,"built_on_fallback":false,"repair_of":2,"repair_gap":false}`, "c");
  assert.equal(v.value.repair_of, 2);
  assert.throws(() => decodeValue(`${head},"repair_of":"2"}`, "c"), /repair_of/);
  assert.throws(() => decodeValue(`${head},"built_on_fallback":"yes"}`, "c"), /built_on_fallback/);
});

test("evidence_text follows the summary after a blank line; evidence is checked as Go decodes it", () => {
  const head = '{"schema_version":1,"conversation":"c","tail_start_seq":2,"covered_through_seq":1';
  const v = decodeValue(`${head},"summary":"s","evidence_text":"[e]","evidence":{"through_seq":1,"items":[{"kind":"file","value":"a.go","count":1,"last_seq":1,"changed":true}]}}`, "c");
  assert.equal(v.evidenceText, "[e]");
  assert.equal(summaryText(v.summary, v.evidenceText), SUMMARY_PREFIX + "s\n\n[e]");
  assert.equal(summaryText("s", ""), SUMMARY_PREFIX + "s", "a value without evidence_text renders as before");
  assert.throws(() => decodeValue(`${head},"evidence_text":7}`, "c"), /evidence_text/);
  assert.throws(() => decodeValue(`${head},"evidence":[]}`, "c"), /evidence/);
  assert.throws(() => decodeValue(`${head},"evidence":{"items":[{"count":"1"}]}}`, "c"), /evidence/);
  assert.throws(() => decodeValue(`${head},"evidence":{"through_seq":-1}}`, "c"), /evidence/);
});

test("offload and restore give the message back", () => {
  const m = decodeMessage(bytes('{"role":"tool","tool_call_id":"t","content":[{"type":"text","text":"big"}],"reasoning":"r","extra":{"s":1},"x-y":2,"meta":{"k":"v"}}'));
  const { stub, object, ref } = offload(m, "conv", "compaction-objects");
  assert.equal(ref.name, `conv/${ref.sha256}`);
  assert.deepStrictEqual(
    { role: stub.role, tool_call_id: stub.tool_call_id, meta: stub.meta, reasoning: stub.reasoning, extra: stub.extra },
    { role: "tool", tool_call_id: "t", meta: { k: "v" }, reasoning: undefined, extra: undefined },
  );
  assert.equal(ref.tokens, 1 + 1, "the chars/4 estimate of content and reasoning");
  assert.deepStrictEqual(restore(stub, object), m);
  assert.throws(() => restore(stub, bytes('{"content":"x","role":"system"}')), (e: ObjectGap) => e.kind === "refused");
  assert.throws(() => restore(stub, bytes("[1]")), /not a JSON object/);
  assert.throws(() => offload(stub, "conv", "compaction-objects"), InvalidError);
});

test("checkPairs finds a broken tool round", () => {
  const call: Message = { role: "assistant", content: null, tool_calls: [{ id: "a", type: "function", function: { name: "f", arguments: "" } }] };
  assert.equal(checkPairs([call, { role: "tool", tool_call_id: "a", content: "r" }]), null);
  assert.match(checkPairs([call, { role: "user", content: "x" }])!, /comes before the results of \[a\]/);
  assert.match(checkPairs([{ role: "tool", tool_call_id: "a", content: "r" }])!, /without its call/);
  assert.match(checkPairs([call])!, /have no result/);
});

test("connection settings come from the environment", () => {
  assert.deepStrictEqual(connectOptionsFromEnv({}), { servers: "nats://127.0.0.1:4222" });
  assert.deepStrictEqual(
    connectOptionsFromEnv({ NATS_URL: "nats://h:1", NATS_USER: "u", NATS_PASSWORD: "p", NATS_INBOX_PREFIX: "_INBOX_u", NATS_CA: "ca.pem" }),
    { servers: "nats://h:1", user: "u", pass: "p", inboxPrefix: "_INBOX_u", caFile: "ca.pem" },
  );
  assert.deepStrictEqual(connectOptionsFromEnv({ NATS_TOKEN: "t" }), { servers: "nats://127.0.0.1:4222", token: "t" });
});

test("NATS_USER without NATS_PASSWORD is a token, as the Go CLI and the nats CLI read it", () => {
  const cases: Array<[string, Record<string, string>, object]> = [
    ["no password", { NATS_USER: "s3cret" }, { token: "s3cret" }],
    ["an empty password", { NATS_USER: "s3cret", NATS_PASSWORD: "" }, { token: "s3cret" }],
    ["NATS_TOKEN too: the user wins, as in Go", { NATS_USER: "s3cret", NATS_TOKEN: "other" }, { token: "s3cret" }],
    ["with a password: a user", { NATS_USER: "u", NATS_PASSWORD: "p" }, { user: "u", pass: "p" }],
  ];
  for (const [what, env, want] of cases) {
    assert.deepStrictEqual(connectOptionsFromEnv({ NATS_URL: "nats://h:1", ...env }), { servers: "nats://h:1", ...want }, what);
  }
});

test("RECALL_TOOL is schemas/recall-tool.json", async () => {
  const { readFileSync } = await import("node:fs");
  const file = JSON.parse(readFileSync(new URL("../../../../schemas/recall-tool.json", import.meta.url), "utf8"));
  assert.deepStrictEqual(RECALL_TOOL, file);
});

test("decodeRecallArguments reads a model's arguments by the service's rules", () => {
  assert.deepStrictEqual(decodeRecallArguments(`{"query":"db.yaml","from_seq":2,"to_seq":9,"max_tokens":500}`), {
    query: "db.yaml",
    fromSeq: 2,
    toSeq: 9,
    maxTokens: 500,
  });
  assert.deepStrictEqual(decodeRecallArguments(""), { query: undefined, fromSeq: undefined, toSeq: undefined, maxTokens: undefined });
  for (const [args, field] of [
    [`{"regex":"x"}`, "arguments"],
    [`{"conversation":"other"}`, "arguments"],
    [`[1]`, "arguments"],
    [`{`, "arguments"],
    [`{"from_seq":-1}`, "from_seq"],
    [`{"to_seq":"9"}`, "to_seq"],
    [`{"from_seq":9,"to_seq":3}`, "from_seq"],
    [`{"max_tokens":1000001}`, "max_tokens"],
    [`{"query":"${"q".repeat(1025)}"}`, "query"],
    [`{"query":5}`, "query"],
  ] as const) {
    assert.throws(() => decodeRecallArguments(args), (e: unknown) => e instanceof InvalidError && e.field === field, args.slice(0, 40));
  }
});

test("a non-text part cannot hide text from the count, as in Go", () => {
  const big = "word ".repeat(180_000); // 900 KB
  for (const part of [{ type: "refusal", refusal: big }, { type: "made_up", payload: { nested: big } }]) {
    const m = { role: "assistant", content: [part] } as unknown as Message;
    assert.ok(estimateTokens(m) >= big.length / 4, `${part.type}: estimate ${estimateTokens(m)}`);
    assert.ok(messageTokens({ ...m, tokens: 1 }) >= big.length / 8, `${part.type} declared 1 token: ${messageTokens({ ...m, tokens: 1 })}`);
  }
  const image = { role: "user", content: [{ type: "image_url", image_url: { url: "data:image/png;base64," + "A".repeat(400_000) } }] } as unknown as Message;
  assert.equal(estimateTokens(image), 4 + 256, "an image weighs its fixed cost");
  // Bytes in keys, numbers, or a field beside a part's text or media count too.
  const k = "k".repeat(900_000);
  for (const part of [
    { type: "blob", data: Array.from({ length: 90_000 }, () => 123456789) },
    { type: "blob", [k]: 1 },
    { type: "image_url", image_url: { url: "https://x/y.png" }, detail_text: k },
    { type: "text", text: "hi", annotations: k },
  ]) {
    const m = { role: "tool", tool_call_id: "c", tokens: 1, content: [part] } as unknown as Message;
    assert.ok(floorTokens(m) >= 900_000 / 16, `floor ${floorTokens(m)} for a ${part.type} part`);
  }
});

test("a declared count is held to a token per 8 UTF-8 bytes of the content, as Go holds it", () => {
  const big = "log line 0123456789 abcdefghijklmnopqrstuvwxyz\n".repeat(900_000 / 48);
  const declared = (content: string, tokens: number): Message => ({ role: "tool", tool_call_id: "c", content, tokens });
  assert.equal(messageTokens(declared(big, 1)), Math.ceil(big.length / 8), "900 KB marked tokens: 1");
  assert.equal(messageTokens(declared("x".repeat(80), 15)), 15, "an honest count above the floor stands");
  // Bytes, not UTF-16 code units: é is 2 bytes and 1 unit, 😀 4 bytes and 2 units.
  assert.equal(floorTokens(declared("é".repeat(40), 1)), 10);
  assert.equal(messageTokens(declared("😀".repeat(10), 1)), 5);
  const parts: Message = {
    role: "assistant",
    name: "bob",
    reasoning: "12345678",
    tokens: 2,
    content: [{ type: "text", text: "abcdefgh" }, { type: "image_url", image_url: { url: "https://x/a/very/long/url/that/does/not/count" } }],
    tool_calls: [{ id: "a", type: "function", function: { name: "ls", arguments: `{"p":1}` } }],
  };
  assert.equal(messageTokens(parts), 6, "name 3 + ls 2 + args 7 + reasoning 8 + text 8 + the image's fields beside its url 17 = 45 bytes");
  const ref = { bucket: "compaction-objects", name: "c/x", size: 900_000, sha256: "x", tokens: 1 };
  const stub: Message = { role: "tool", tool_call_id: "c", content: "[stored]", content_ref: ref };
  assert.equal(estimateTokens(stub), 4 + 112_500, "a stub's reference of 1 token for 900 KB");
  assert.equal(messageTokens({ ...stub, tokens: 1 }), 112_500);
  assert.equal(estimateTokens({ ...stub, content_ref: { ...ref, size: 800, tokens: 300 } }), 4 + 300);
});

test("the read-time cut counts the content of a message marked tokens: 1", () => {
  const out = "x".repeat(40_000);
  const call: Message = { role: "assistant", content: null, tool_calls: [{ id: "a", type: "function", function: { name: "f", arguments: "{}" } }] };
  const tail = [
    { seq: 1, message: call },
    { seq: 2, message: { role: "tool", tool_call_id: "a", content: out, tokens: 1 } as Message },
  ];
  const whole = assemble({ value: null, pinned: [], tail });
  assert.ok(whole.tokens >= 5000, `tokens ${whole.tokens}; want at least the floor of 40,000 bytes`);
  const cut = assemble({ value: null, pinned: [], tail }, { maxTokens: 2000 });
  assert.ok(cut.degraded && cut.tokens <= 2000, `degraded ${cut.degraded}, tokens ${cut.tokens}; want a degraded read within 2,000`);
  assert.ok((cut.messages[1]!.content as string).length < 8000, "the tool output is cut");
});

test("recall arguments are bounded in UTF-8 bytes, as Go bounds them", () => {
  // 4,100 é: 4,112 UTF-16 code units, 8,212 bytes: over the 8,192 bytes Go allows.
  const args = `{"query":"${"é".repeat(4100)}"}`;
  assert.throws(
    () => decodeRecallArguments(args),
    (e: unknown) => e instanceof InvalidError && e.field === "arguments" && /8212 bytes/.test(e.message),
  );
});

// The publish path decodes a message from its JSON.stringify text without parsing the
// text whole first, and writes its encoding from that text: the reference is the path
// it replaced, decodeMessageText of the text and encodeMessage of the result.
function publishedAsBefore(input: unknown): boolean {
  const text = JSON.stringify(input);
  let want: Message | undefined;
  let wantErr: unknown;
  try {
    want = decodeMessageText(text);
  } catch (e) {
    wantErr = e;
  }
  if (wantErr !== undefined) {
    assert.throws(() => checkMessageEncoded(input), (e: InvalidError) => e.message === (wantErr as Error).message, text);
    return false;
  }
  const { message, data } = checkMessageEncoded(input);
  assert.deepStrictEqual(message, want, text);
  assert.deepStrictEqual(data, utf8Bytes(encodeMessage(want!)), text);
  return true;
}

// Strings that end where a careless scan of quotes and backslashes would not.
const tricky = ['a"b', "a\\", '\\"', 'x\\\\"y', "\u0022", "\n", "é😀", "", "}", "]", '{"k":"v"}', "\\\"", "1"];

test("a message is published as the decode it replaced decodes and encodes it", () => {
  let seed = 42;
  const rnd = (n: number) => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0), (seed >>> 16) % n);
  const str = () => Array.from({ length: rnd(4) }, () => tricky[rnd(tricky.length)]).join("");
  const val = (depth: number): unknown => {
    switch (rnd(depth > 2 ? 4 : 6)) {
      case 0:
        return str();
      case 1:
        return rnd(1000) - 500;
      case 2:
        return [true, false, null][rnd(3)];
      case 3:
        return rnd(2) ? 1.5e300 : -0;
      case 4:
        return Array.from({ length: rnd(3) }, () => val(depth + 1));
      default:
        return Object.fromEntries(Array.from({ length: rnd(3) }, () => [str(), val(depth + 1)]));
    }
  };
  const roles = ["user", "assistant", "tool", "system", "robot"];
  let valid = 0;
  for (let i = 0; i < 3000; i++) {
    const m: Record<string, unknown> = { role: roles[rnd(roles.length)] };
    if (rnd(4)) m["content"] = rnd(3) ? str() : [{ type: "text", text: str() }, { type: str(), x: val(0) }];
    if (m["role"] === "tool") m["tool_call_id"] = str() || "c";
    if (m["role"] === "assistant" && rnd(2)) {
      m["tool_calls"] = [{ id: `${str()}1`, type: "function", function: { name: str() || "f", arguments: JSON.stringify(val(0)) }, [str()]: val(1) }];
      if (rnd(2)) m["tool_calls"] = [...(m["tool_calls"] as unknown[]), { ID: "2", Type: "function", Function: { Name: "g", Arguments: "{}" } }];
    }
    if (rnd(3) === 0) m["extra"] = rnd(4) ? { [str()]: val(0) } : val(1);
    if (rnd(4) === 0) m["name"] = str();
    if (rnd(4) === 0) m["meta"] = { pin: "true", [str()]: str() };
    if (rnd(4) === 0) m["tokens"] = rnd(100);
    if (rnd(3) === 0) m[str() || "__proto__"] = val(0);
    if (rnd(5) === 0) m["7"] = val(1);
    if (publishedAsBefore(m)) valid++;
  }
  assert.ok(valid > 1000, `${valid} of 3000 messages valid`);
  publishedAsBefore({ toJSON: () => ({ role: "user", content: "from toJSON" }) });
  publishedAsBefore({ toJSON: () => ["not", "an", "object"] });
  publishedAsBefore({ role: "user", content: "x", extra: { toJSON: () => ({ a: "b" }) } });
});

test("the example transcripts are published as the decode it replaced decodes and encodes them", () => {
  const dir = new URL("../../../../examples/transcripts/", import.meta.url).pathname;
  let n = 0;
  for (const f of readdirSync(dir).filter((f) => f.endsWith(".jsonl"))) {
    for (const line of readFileSync(dir + f, "utf8").split("\n")) {
      if (line.trim() === "") continue;
      publishedAsBefore(JSON.parse(line));
      n++;
    }
  }
  assert.ok(n > 200, `${n} messages`);
});

test("raw members and elements end where JSON.parse ends them", () => {
  const values: unknown[] = [tricky, Object.fromEntries(tricky.map((t, i) => [t, tricky[(i + 3) % tricky.length]])), [[tricky], { a: [{ b: "\\" }] }]];
  for (const v of values) {
    const text = JSON.stringify(v);
    if (Array.isArray(v)) assert.deepStrictEqual(rawElements(text).map((e) => JSON.parse(e)), v);
    else assert.deepStrictEqual(Object.fromEntries(rawMembers(text).map(([k, e]) => [k, JSON.parse(e)])), v);
  }
});

// The @nats-io packages report errors as classes, the one that matters often the cause of
// a RequestError (or of that RequestError's JetStream error), not as codes.
test("errors of the @nats-io packages become the client's, found through their causes", () => {
  const refusal = new nats.PermissionViolationError('Permissions Violation for Publish to "compactor.compact"', "publish", "compactor.compact");
  const refused = mapNatsError(new nats.RequestError(refusal.message, { cause: refusal }), "compactor.compact");
  assert.ok(refused instanceof PermissionError, String(refused));
  assert.match(refused.message, /^compactor\.compact: Permissions Violation for Publish to "compactor\.compact"$/);
  const sub = new nats.PermissionViolationError('Permissions Violation for Subscription to "_INBOX.x"', "subscription", "_INBOX.x");
  assert.ok(mapNatsError(sub, "direct get") instanceof PermissionError);

  assert.ok(mapNatsError(new nats.TimeoutError(), "leader get") instanceof TimeoutError);

  const none = new nats.RequestError("no responders", { cause: new nats.NoRespondersError("compactor.compact") });
  const jsNone = new Error("jetstream is not enabled", { cause: none }); // what a JetStream publish no stream stores throws
  for (const e of [none, jsNone]) {
    assert.equal(noResponders(e), true);
    const mapped = mapNatsError(e, "publish");
    assert.ok(mapped instanceof NotFoundError, String(mapped));
    assert.equal(mapped.cause, e);
  }
  assert.equal(noResponders(new nats.RequestError("cancelled")), false);

  const other = mapNatsError(new nats.ProtocolError("stale connection"), "connect");
  assert.equal(other.constructor, CompactorError);
  assert.equal(other.message, "connect: stale connection");
  const ours = new NotFoundError("kept");
  assert.equal(mapNatsError(ours, "x"), ours);
  // A cycle of causes ends.
  const a = new Error("a");
  const b = new Error("b", { cause: a });
  (a as { cause?: unknown }).cause = b;
  assert.equal(mapNatsError(a, "loop").constructor, CompactorError);
});

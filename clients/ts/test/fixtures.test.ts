// The shared reader fixtures (schemas/testdata/reader, format in its README.md): the
// same files the Go reader runs (internal/systemtest/readerfixtures_test.go). Each runs
// through the reader on the fixture's own data, and, when the Go test loaded servers
// with them (COMPACTOR_FIXTURE_SERVERS), through the client against that server.

import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { test } from "node:test";
import {
  checkBytes,
  checkInfo,
  checkOwner,
  Compactor,
  decodeValue,
  MAX_OBJECT_SIZE,
  missingPinned,
  ObjectGap,
  OBJECTS_BUCKET,
  readContext,
  toEntry,
  type Context,
  type ContextSource,
} from "../src/index.js";
import { memberMap, rawElements, utf8Bytes } from "../src/json.js";
import { sha256Hex } from "../src/objects.js";
import { need } from "./env.js";

const dir = process.env["COMPACTOR_READER_FIXTURES"] ?? new URL("../../../../schemas/testdata/reader/", import.meta.url).pathname;

interface StoredMessage {
  seq: number;
  conversation: string;
  data: Uint8Array;
  deleted: boolean;
}

interface Fixture {
  name: string;
  conversation: string;
  valueText: string | null;
  messages: StoredMessage[];
  objects: Map<string, Uint8Array>; // by name
  options: { raw?: boolean; max_tokens?: number };
  expected: {
    error?: string;
    messages?: unknown[];
    seqs?: number[];
    generation?: number;
    tail_start_seq?: number;
    has_summary?: boolean;
    tokens?: number;
    degraded?: boolean;
    skipped?: Array<{ seq: number; reason: string }>;
  };
}

interface RawObject {
  id: string;
  conversation?: string;
  raw: string;
  stored?: boolean;
}

/** Reads one fixture file; the value and messages keep their source text. */
function load(name: string): Fixture {
  const text = readFileSync(`${dir}/${name}.json`, "utf8");
  const parsed = JSON.parse(text);
  const top = memberMap(text);
  const conv: string = parsed.conversation;
  const objects: RawObject[] = parsed.objects ?? [];
  const nameOf = (o: RawObject) => `${o.conversation ?? conv}/${sha256Hex(utf8Bytes(o.raw))}`;
  const rawMessages = rawElements(top.get("messages") ?? "[]");
  const messages: StoredMessage[] = parsed.messages.map((m: Record<string, unknown>, i: number) => {
    let data: Uint8Array;
    if (typeof m["raw"] === "string") data = utf8Bytes(m["raw"]);
    else if (typeof m["raw_base64"] === "string") data = new Uint8Array(Buffer.from(m["raw_base64"], "base64"));
    else {
      const msgText = memberMap(rawMessages[i]!).get("message")!;
      const msg = JSON.parse(msgText);
      const ref = msg?.content_ref;
      if (ref && typeof ref === "object" && "object" in ref) {
        // A placeholder naming a fixture object: its name, size and sha256 filled in.
        const o = objects.find((x) => x.id === ref.object)!;
        const bytes = utf8Bytes(o.raw);
        const objName = nameOf(o);
        delete ref.object;
        ref.bucket ??= OBJECTS_BUCKET;
        ref.name ??= objName;
        ref.size ??= bytes.length;
        ref.sha256 ??= objName.slice(objName.lastIndexOf("/") + 1);
        msg.content ??= `[content of ${bytes.length} bytes stored as object ${objName} of bucket ${OBJECTS_BUCKET}]`;
        data = utf8Bytes(JSON.stringify(msg));
      } else data = utf8Bytes(msgText);
    }
    return { seq: m["seq"] as number, conversation: (m["conversation"] as string) ?? conv, data, deleted: m["deleted"] === true };
  });
  const stored = new Map<string, Uint8Array>();
  for (const o of objects) if (o.stored !== false) stored.set(nameOf(o), utf8Bytes(o.raw));
  const hasValue = parsed.value !== undefined && parsed.value !== null && parsed.value_deleted !== true;
  return {
    name,
    conversation: conv,
    valueText: hasValue ? top.get("value")! : null,
    messages,
    objects: stored,
    options: parsed.options ?? {},
    expected: parsed.expected,
  };
}

/** The fixture's data as a reader's source: what a server loaded with it holds. */
function source(fx: Fixture): ContextSource {
  const live = fx.messages.filter((m) => !m.deleted);
  const toStored = (m: StoredMessage) => toEntry({ seq: m.seq, subject: "", time: "", headers: new Map(), data: m.data });
  return {
    value: async (conv) => (fx.valueText === null ? null : decodeValue(fx.valueText, conv)),
    pinned: async (conv, seqs) =>
      seqs.map((seq) => {
        const m = live.find((x) => x.seq === seq && x.conversation === conv);
        return m ? toStored(m) : missingPinned(seq);
      }),
    tail: async (conv, from) => live.filter((m) => m.conversation === conv && m.seq >= from).map(toStored),
    object: async (conv, ref) => {
      checkOwner(ref, conv, OBJECTS_BUCKET, MAX_OBJECT_SIZE);
      const bytes = fx.objects.get(ref.name);
      if (!bytes) throw new ObjectGap("missing", `${ref.name} of bucket ${OBJECTS_BUCKET} (deleted, purged, aged out or never stored)`);
      const digest = Buffer.from(sha256Hex(bytes), "hex").toString("base64url");
      checkInfo(
        { name: ref.name, bucket: OBJECTS_BUCKET, size: bytes.length, digest: `SHA-256=${digest}=`, nuid: "fixture", chunks: 1 },
        ref,
        OBJECTS_BUCKET,
      );
      checkBytes(bytes, ref);
      return bytes;
    },
  };
}

function check(fx: Fixture, read: () => Promise<Context>): Promise<void> {
  const want = fx.expected;
  if (want.error) return assert.rejects(read, (e: Error) => e.message.includes(want.error!), `want an error with ${want.error}`);
  return read().then((cx) => {
    assert.deepStrictEqual(JSON.parse(JSON.stringify(cx.messages)), want.messages);
    assert.deepStrictEqual(cx.seqs, want.seqs);
    assert.deepStrictEqual(
      { generation: cx.generation, tail_start_seq: cx.tailStartSeq, has_summary: cx.hasSummary, tokens: cx.tokens, degraded: cx.degraded },
      { generation: want.generation, tail_start_seq: want.tail_start_seq, has_summary: want.has_summary, tokens: want.tokens, degraded: want.degraded },
    );
    assert.equal(cx.skipped.length, want.skipped!.length, `skipped ${JSON.stringify(cx.skipped)}`);
    cx.skipped.forEach((s, i) => {
      const w = want.skipped![i]!;
      assert.ok(s.seq === w.seq && s.reason.includes(w.reason), `skipped ${i}: ${s.seq} ${JSON.stringify(s.reason)}; want ${w.seq} with ${JSON.stringify(w.reason)}`);
    });
  });
}

const names = readdirSync(dir)
  .filter((f) => f.endsWith(".json"))
  .map((f) => f.slice(0, -5))
  .sort();

test("the fixtures are there", () => {
  assert.ok(names.length >= 10, `only ${names.length} fixtures in ${dir}`);
});

for (const name of names) {
  test(`fixture ${name}`, async () => {
    const fx = load(name);
    await check(fx, () => readContext(source(fx), fx.conversation, { raw: fx.options.raw, maxTokens: fx.options.max_tokens }));
  });
}

test("fixtures against servers loaded with them", async (t) => {
  const servers = need("COMPACTOR_FIXTURE_SERVERS");
  const urls: Record<string, string> = JSON.parse(servers);
  assert.deepStrictEqual(Object.keys(urls).sort(), names, "every fixture has its server");
  for (const name of names) {
    await t.test(name, async () => {
      const fx = load(name);
      const c = await Compactor.connect({ servers: urls[name]! });
      try {
        await check(fx, () => c.context(fx.conversation, { format: fx.options.raw ? "raw" : "openai", maxTokens: fx.options.max_tokens }));
      } finally {
        await c.close();
      }
    });
  }
});

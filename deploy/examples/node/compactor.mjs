// Compactor from Node.js with the plain NATS client: publish chat messages and read the
// compacted context ("pinned + summary + tail") with the reader algorithm of the README.
//
//   npm install
//   node compactor.mjs publish <conv> < conversation.jsonl
//   node compactor.mjs context <conv>
//   node compactor.mjs forget <conv>     (deletes it everywhere, through the service)
//
// NATS_URL defaults to nats://127.0.0.1:4222 (the embedded server of `compactor serve`).
// A message over the server's max payload is stored as an object and published as a stub;
// the reader restores stubs, and skips and reports one whose object is gone or refused.
import { connect, createInbox, credsAuthenticator, StringCodec } from "nats";
import { readFileSync } from "node:fs";
import { createHash, randomUUID } from "node:crypto";

const SUMMARY_PREFIX =
  "[Summary of the earlier conversation, written by Compactor. The messages it replaces are not shown.]\n\n";
const ID_RULE = /^[A-Za-z0-9_-]{1,128}$/;
const sc = StringCodec();
// Stored messages are decoded strictly: invalid UTF-8 is refused as the Go reader refuses
// it, instead of being turned into U+FFFD (a silent change of the producer's bytes).
const strictUTF8 = new TextDecoder("utf-8", { fatal: true });
// JetStream contexts skip nats.js's account-info check ($JS.API.INFO): the users of
// deploy/nats/accounts.conf are allowed only the requests their role needs.
function decodeJSON(bytes) {
  let text;
  try {
    text = strictUTF8.decode(bytes);
  } catch {
    throw new SyntaxError("not valid UTF-8");
  }
  return JSON.parse(text);
}

// Messages over the server's max payload (README, "Large messages"): their content,
// reasoning, extra and unknown fields are stored as one object of this bucket, named
// <conv>/<sha256>, and a stub with a content_ref is published in their place.
const OBJECTS = "compaction-objects";
const OBJECTS_STREAM = `OBJ_${OBJECTS}`;
const HEADER_ROOM = 512; // of the max payload, for a publish's headers besides the message id
const MAX_OBJECT = 16 << 20; // jetstream.DefaultMaxObjectSize
// The fields a stub keeps; every other field moves into the object.
const STUB_FIELDS = ["role", "name", "tool_calls", "tool_call_id", "tokens", "usage", "context_generation", "meta"];
const CONTRACT_FIELDS = new Set([...STUB_FIELDS, "content", "reasoning", "extra", "content_ref"]);

// Every message gets its own Nats-Msg-Id: this run's random id plus the line number.
// Within the stream's duplicate window (2 minutes) a second message with an id the stream
// has seen is discarded, so an id must never be reused for a different message (another
// run, another line). A retry of the same line sends the same id, so a publish whose
// acknowledgement was lost is stored once.
async function publish(nc, conv) {
  const js = nc.jetstream({ checkAPI: false });
  const run = randomUUID();
  // Each line is decoded strictly: invalid UTF-8 stops the run at its line, as Go's
  // Publish refuses it, rather than being stored as U+FFFD.
  let n = 0;
  for await (const bytes of byteLines(process.stdin)) {
    let line;
    try {
      line = strictUTF8.decode(bytes).replace(/\r$/, "");
    } catch {
      throw new Error(`line ${n + 1}: not valid UTF-8`);
    }
    if (!line.trim()) continue;
    n++;
    const msg = JSON.parse(line); // refuse malformed JSON before it reaches the stream
    const msgID = `${run}-${n}`;
    let data = sc.encode(line);
    const limit = nc.info.max_payload - HEADER_ROOM - msgID.length;
    if (data.length > limit) data = sc.encode(await offload(nc, conv, msg, data.length, limit));
    const ack = await publishRetrying(js, `chat.${conv}.msg`, data, msgID);
    if (ack.duplicate) console.error(`line ${n}: stored once at seq ${ack.seq} (a retry of it was discarded)`);
    console.log(ack.seq);
  }
}

// byteLines yields the lines of a byte stream, undecoded.
async function* byteLines(stream) {
  let parts = [];
  for await (const chunk of stream) {
    let start = 0;
    for (let i; (i = chunk.indexOf(10, start)) >= 0; start = i + 1) {
      parts.push(chunk.subarray(start, i));
      yield Buffer.concat(parts);
      parts = [];
    }
    if (start < chunk.length) parts.push(chunk.subarray(start));
  }
  if (parts.length) yield Buffer.concat(parts);
}

// publishRetrying retries a publish that got no acknowledgement (a timeout, no responders
// during a leader election) with the same message id, well inside the duplicate window.
async function publishRetrying(js, subject, data, msgID, attempts = 5) {
  for (let i = 1; ; i++) {
    try {
      return await js.publish(subject, data, { msgID });
    } catch (e) {
      if (i >= attempts) throw e;
      console.error(`publish ${msgID}: ${e.message}; retrying`);
      await new Promise((r) => setTimeout(r, 250 * 2 ** i));
    }
  }
}

// offload stores what makes msg large as an object and returns the stub to publish:
// role, name, tool calls, tool_call_id and metadata, a note for content, and a
// content_ref. It refuses, naming the limit and the size, a message whose stub is still
// over the limit (huge tool call arguments) or whose object is over MAX_OBJECT.
async function offload(nc, conv, msg, size, limit) {
  if (msg.content_ref != null) throw new Error("content_ref is set by the client for a message over the max payload; publish the whole message");
  const object = { content: msg.content ?? null };
  if (msg.reasoning) object.reasoning = msg.reasoning;
  if (msg.extra != null) object.extra = msg.extra;
  for (const k of Object.keys(msg).sort()) if (!CONTRACT_FIELDS.has(k)) object[k] = msg[k];
  const bytes = Buffer.from(JSON.stringify(object));
  const sha256 = createHash("sha256").update(bytes).digest("hex");
  const name = `${conv}/${sha256}`;
  const stub = { role: msg.role, content: `[content of ${bytes.length} bytes stored as object ${name} of bucket ${OBJECTS}]` };
  for (const k of STUB_FIELDS) if (msg[k] != null) stub[k] = msg[k];
  stub.content_ref = { bucket: OBJECTS, name, size: bytes.length, sha256, tokens: storedTokens(msg) };
  const data = JSON.stringify(stub);
  const max = nc.info.max_payload;
  if (Buffer.byteLength(data) > limit) {
    throw new Error(`message too large: the message is ${size} bytes, over the limit of ${limit} bytes (the server's max_payload ${max} less ${max - limit} for headers), ` +
      `and still ${Buffer.byteLength(data)} bytes with its content stored as an object: its tool calls, name and metadata must fit in the limit`);
  }
  if (bytes.length > MAX_OBJECT) {
    throw new Error(`message too large: the message is ${size} bytes, over the limit of ${limit} bytes (the server's max_payload), ` +
      `and its content of ${bytes.length} bytes is over the max object size of ${MAX_OBJECT} bytes`);
  }
  await putObject(nc, name, bytes, sha256);
  return data;
}

// The chars/4 estimate of what the object holds (content text, 256 per non-text part,
// reasoning): the stub's weight, so the trigger counts it without fetching the object.
function storedTokens(msg) {
  const t = (s) => Math.ceil([...(typeof s === "string" ? s : "")].length / 4);
  let n = t(msg.reasoning);
  if (typeof msg.content === "string") n += t(msg.content);
  else if (Array.isArray(msg.content)) for (const p of msg.content) n += p?.type === "text" ? t(p.text) : 256;
  return n;
}

// putObject stores bytes as object name unless the bucket holds the same bytes already
// (names are content addressed, so a retry stores nothing twice). When the bucket ages
// objects out (CHAT has a max age), one stored more than a minute ago (half the duplicate
// window) is stored again, so it outlives the new message that refers to it.
async function putObject(nc, name, bytes, sha256) {
  const jsm = await nc.jetstreamManager({ checkAPI: false });
  let si;
  try {
    si = await jsm.streams.info(OBJECTS_STREAM); // never let the client create it with other settings
  } catch (e) {
    throw new Error(`objects bucket ${OBJECTS} does not exist (a compactor of this version creates it at start): ${e.message}`);
  }
  const have = await objectInfo(jsm, name).catch(() => null);
  const fresh = si.config.max_age === 0 || Date.now() - Date.parse(have?.mtime) < 60_000;
  if (have && checkInfo(have, { name, size: bytes.length, sha256 }) === null && fresh) return;
  // Written in the object store's format with plain publishes: the bucket refuses the
  // roll-up nats.js's put sends with the description.
  const js = nc.jetstream({ checkAPI: false });
  const chunk = Math.max(1, Math.min(128 * 1024, nc.info.max_payload - HEADER_ROOM));
  const nuid = randomUUID().replaceAll("-", "").toUpperCase();
  let chunks = 0;
  for (let off = 0; off < bytes.length; off += chunk, chunks++) {
    await js.publish(`$O.${OBJECTS}.C.${nuid}`, bytes.subarray(off, off + chunk), { expect: { streamName: OBJECTS_STREAM } });
  }
  const digest = "SHA-256=" + createHash("sha256").update(bytes).digest("base64").replaceAll("+", "-").replaceAll("/", "_");
  const info = { name, options: { max_chunk_size: chunk }, bucket: OBJECTS, nuid, size: bytes.length, mtime: new Date().toISOString(), chunks, digest };
  const subj = `$O.${OBJECTS}.M.${Buffer.from(name).toString("base64url")}${"=".repeat((3 - (Buffer.byteLength(name) % 3)) % 3)}`;
  await js.publish(subj, sc.encode(JSON.stringify(info)), { expect: { streamName: OBJECTS_STREAM } });
}

// objectInfo reads an object's description from the stream leader; null when the
// bucket holds no such object (or no bucket).
async function objectInfo(jsm, name) {
  const subj = `$O.${OBJECTS}.M.${Buffer.from(name).toString("base64url")}${"=".repeat((3 - (Buffer.byteLength(name) % 3)) % 3)}`;
  try {
    const sm = await jsm.streams.getMessage(OBJECTS_STREAM, { last_by_subj: subj });
    const info = JSON.parse(sc.decode(sm.data));
    info.mtime = sm.time?.toISOString?.() ?? info.mtime;
    return info;
  } catch (e) {
    if (e.code === "404") return null;
    throw e;
  }
}

// checkInfo compares an object's description with a reference before anything of it is
// read; it returns why they differ, or null.
function checkInfo(info, ref) {
  const digest = "SHA-256=" + Buffer.from(ref.sha256, "hex").toString("base64url") + "=";
  if (info.deleted) return `missing: ${ref.name} was deleted`;
  if (info.options?.link) return `refused: ${ref.name} is a link; links are not followed`;
  if (info.name !== ref.name || info.bucket !== OBJECTS) return `corrupt: ${ref.name}: its description names another object`;
  if (info.size !== ref.size) return `corrupt: ${ref.name} holds ${info.size} bytes, the reference says ${ref.size}`;
  if (info.digest !== digest) return `corrupt: ${ref.name}: its digest is not the reference's sha256`;
  if (!/^[A-Za-z0-9]{1,64}$/.test(info.nuid ?? "") || !(info.chunks >= 1 && info.chunks <= info.size)) return `corrupt: ${ref.name}: its chunks are not described`;
  return null;
}

// A message the reader skips and reports: its object is missing, corrupt or refused.
class Gap extends Error {}

// readObject fetches the object a stub of conversation conv names: refused before any
// request when it is another conversation's, another bucket's or too large, bounded by
// its size, checked against its sha256. The same steps as the Go reader.
async function readObject(nc, jsm, conv, ref) {
  if (ref === null || typeof ref !== "object" || Array.isArray(ref)) throw new Gap("content_ref refused: must be an object");
  if (ref.bucket !== OBJECTS) throw new Gap(`content_ref refused: names bucket ${JSON.stringify(ref.bucket)}; objects of this conversation are in ${OBJECTS}`);
  if (typeof ref.name !== "string" || !ref.name.startsWith(`${conv}/`)) {
    throw new Gap(`content_ref refused: names object ${JSON.stringify(ref.name)} outside conversation ${JSON.stringify(conv)}`);
  }
  if (!/^[0-9a-f]{64}$/.test(ref.sha256) || ref.name !== `${conv}/${ref.sha256}` || !Number.isInteger(ref.size) || ref.size < 14) {
    throw new Gap("content_ref refused: must be {bucket, name: <conversation>/<sha256>, size, sha256, tokens}");
  }
  if (ref.size > MAX_OBJECT) throw new Gap(`content_ref refused: ${ref.name} of ${ref.size} bytes is over the max object size of ${MAX_OBJECT} bytes`);
  const info = await objectInfo(jsm, ref.name);
  if (!info) throw new Gap(`stored object is missing: ${ref.name} of bucket ${OBJECTS} (deleted, purged, aged out or never stored)`);
  const why = checkInfo(info, ref);
  if (why) throw new Gap(`stored object ${why}`);
  const subj = `$O.${OBJECTS}.C.${info.nuid}`;
  const parts = [];
  let got = 0;
  let from = 1;
  const add = (seq, data) => {
    if (parts.length + 1 > info.chunks || got + data.length > info.size) throw new Gap(`stored object corrupt: ${ref.name} has more than its ${info.size} bytes`);
    parts.push(data);
    got += data.length;
    from = seq + 1;
  };
  while (got < info.size) {
    const { msgs, more } = await directBatch(nc, subj, from, 16, OBJECTS_STREAM);
    for (const m of msgs) add(m.seq, m.data);
    if (!more || msgs.length === 0) break;
  }
  while (got < info.size) { // a replica behind: the leader has every chunk
    let sm;
    try {
      sm = await jsm.streams.getMessage(OBJECTS_STREAM, { seq: from, next_by_subj: subj });
    } catch (e) {
      if (e.code === "404") throw new Gap(`stored object corrupt: ${ref.name}: its chunks end at ${got} of ${info.size} bytes`);
      throw e;
    }
    add(sm.seq, sm.data);
  }
  const bytes = Buffer.concat(parts);
  if (createHash("sha256").update(bytes).digest("hex") !== ref.sha256) {
    throw new Gap(`stored object corrupt: ${ref.name}: its bytes do not hash to the reference's sha256`);
  }
  return bytes;
}

// restore puts a stub and its object back together: the stub's fields, with what the
// object holds; an object may not change the stub's role, tool round or metadata.
function restore(stub, bytes) {
  let object;
  try {
    object = decodeJSON(bytes);
  } catch {
    throw new Gap(`content_ref refused: object ${stub.content_ref.name} is not a JSON object`);
  }
  if (object === null || typeof object !== "object" || Array.isArray(object) || !("content" in object)) {
    throw new Gap(`content_ref refused: object ${stub.content_ref.name} holds no content`);
  }
  const msg = { ...stub };
  delete msg.content_ref;
  delete msg.reasoning;
  delete msg.extra;
  for (const [k, v] of Object.entries(object)) {
    if (CONTRACT_FIELDS.has(k) && !["content", "reasoning", "extra"].includes(k)) {
      throw new Gap(`content_ref refused: object ${stub.content_ref.name} holds "${k}", which only the stub may carry`);
    }
    msg[k] = v;
  }
  return msg;
}

// resolve returns a message with its stored object put back, or throws a Gap.
async function resolve(nc, jsm, conv, msg) {
  if (msg?.content_ref == null) return msg;
  const ref = msg.content_ref;
  try {
    return restore(msg, await readObject(nc, jsm, conv, ref));
  } catch (e) {
    if (e instanceof Gap) throw new Gap(`content_ref ${typeof ref?.name === "string" ? ref.name : "?"}: ${e.message}`);
    throw e;
  }
}

// One batched direct get: every message of subject from seq on, up to batch of them,
// answered by any replica and closed by a 204 "EOB" status.
async function directBatch(nc, subject, seq, batch = 256, stream = "CHAT") {
  return directRequest(nc, { seq, next_by_subj: subject, batch }, stream);
}

// The subjects conversation conv has messages on from seq `from` on: one per partition
// layout that holds any (README, "Scaling the trigger"), found from the last message of
// each subject under chat.<conv>.> (one batched direct get, answered from the server's
// subject index). Each is then read by its literal name: a read of the wildcard from a
// later sequence makes the server scan the blocks in between once CHAT holds 64Ki subjects.
async function chatSubjects(nc, conv, from) {
  const { msgs } = await directRequest(nc, { multi_last: [`chat.${conv}.>`], batch: 16 });
  const subjects = new Set();
  for (const m of msgs) {
    if (!m.subject.startsWith(`chat.${conv}.msg`)) throw new Error(`direct get: answered with subject ${m.subject}`);
    if (m.seq >= from) subjects.add(m.subject);
  }
  return [...subjects];
}

async function directRequest(nc, request, stream = "CHAT") {
  const inbox = createInbox(inboxPrefix);
  const sub = nc.subscribe(inbox, { timeout: 10000 });
  nc.publish(`$JS.API.DIRECT.GET.${stream}`, sc.encode(JSON.stringify(request)), {
    reply: inbox,
  });
  const out = [];
  let more = false;
  for await (const m of sub) {
    const status = m.headers?.code;
    if (m.data.length === 0 && status) {
      if (status === 204) more = Number(m.headers.get("Nats-Num-Pending") || 0) > 0;
      else if (status !== 404) throw new Error(`direct get: ${status} ${m.headers.description}`);
      break;
    }
    out.push({ seq: Number(m.headers.get("Nats-Sequence")), subject: m.headers.get("Nats-Subject"), data: m.data });
  }
  sub.unsubscribe();
  return { msgs: out, more };
}

// tombstone returns conv's forget tombstone ({through_seq, forgotten_at}), null when it
// was not forgotten lately: bucket compaction-forgotten, key the SHA-256 (hex) of the id.
// One batched direct get (a reader may not look the bucket up); a delete marker has no data.
async function tombstone(nc, conv) {
  const subject = `$KV.compaction-forgotten.${createHash("sha256").update(conv, "utf8").digest("hex")}`;
  const { msgs } = await directRequest(nc, { multi_last: [subject], batch: 1 }, "KV_compaction-forgotten");
  return msgs.length > 0 && msgs[0].data.length > 0 ? decodeJSON(msgs[0].data) : null;
}

async function readContext(nc, conv) {
  if (!ID_RULE.test(conv)) throw new Error("conversation id must be 1-128 characters of [A-Za-z0-9_-]");
  // 1. The compaction value (none: the whole history is the tail).
  const kv = await nc.jetstream({ checkAPI: false }).views.kv("compaction");
  const entry = await kv.get(conv);
  let value = entry && entry.operation === "PUT" ? entry.json() : null;
  // 1b. The forget tombstone, read after the value (README, "Forgetting a conversation"):
  //     a value it covers (first_seq <= through_seq) was left by a writer that outlived
  //     the forget and holds something of the forgotten conversation: not served; and
  //     the tail starts above what the forget deleted.
  const tomb = await tombstone(nc, conv);
  if (value && tomb && (value.first_seq ?? 0) <= tomb.through_seq) value = null;
  if (value && value.schema_version > 1) throw new Error(`schema_version ${value.schema_version} is newer than this reader`);
  const context = [];
  const skipped = [];
  const overrides = new Map((value?.overrides ?? []).map((o) => [o.seq, o]));
  // 2. Pinned messages (and those a strategy keeps ahead of the summary), by sequence.
  //    A message over the max payload is a stub: its object is fetched and the message
  //    put back together; a missing, corrupt or refused object is skipped and reported.
  const jsm = await nc.jetstreamManager({ checkAPI: false });
  for (const seq of value?.pinned_seqs ?? []) {
    const sm = await jsm.streams.getMessage("CHAT", { seq });
    try {
      context.push(shape(await resolve(nc, jsm, conv, decodeJSON(sm.data)), overrides.get(seq)));
    } catch (e) {
      if (!(e instanceof Gap)) throw e;
      skipped.push({ seq, reason: `pinned: invalid message: ${e.message}` });
    }
  }
  // 3. The summary as one message.
  // The evidence section, when the value has one, follows the summary after a blank line.
  if (value?.summary) {
    const evidence = typeof value.evidence_text === "string" && value.evidence_text ? "\n\n" + value.evidence_text : "";
    context.push({ role: value.summary_role || "user", content: SUMMARY_PREFIX + value.summary + evidence });
  }
  // 4. The tail, paging with batched direct gets from tail_start_seq, on each subject the
  //    conversation's messages are stored on (chat.<conv>.msg, or with a partitioned
  //    trigger chat.<conv>.msg.<N>.<p>), merged in stream order.
  const start = Math.max(value?.tail_start_seq ?? 1, 1, tomb ? tomb.through_seq + 1 : 1);
  const stored = [];
  for (const subject of await chatSubjects(nc, conv, start)) {
    let from = start;
    for (;;) {
      const { msgs, more } = await directBatch(nc, subject, from);
      stored.push(...msgs);
      if (!more || msgs.length === 0) break;
      from = msgs[msgs.length - 1].seq + 1;
    }
  }
  stored.sort((a, b) => a.seq - b.seq);
  const tail = [];
  {
    const msgs = stored;
    for (const m of msgs) {
      let msg;
      try {
        msg = decodeJSON(m.data);
      } catch (e) {
        skipped.push({ seq: m.seq, reason: `invalid message: ${e.message}` });
        continue;
      }
      try {
        tail.push({ seq: m.seq, msg: await resolve(nc, jsm, conv, msg) });
      } catch (e) {
        if (!(e instanceof Gap)) throw e;
        skipped.push({ seq: m.seq, reason: `invalid message: ${e.message}` });
      }
    }
  }
  // 5. Overrides, tool pairs (a round moves as a whole; incomplete rounds and orphans
  //    are skipped), metadata stripped.
  for (const unit of toolRounds(tail, skipped)) {
    for (const { seq, msg } of unit) context.push(shape(msg, overrides.get(seq)));
  }
  return { context, skipped, generation: value?.generation ?? 0 };
}

// forget asks the compactor service (compactor.forget) to delete a conversation
// everywhere, for good, and returns its answer: the sequence it was forgotten through
// and what was deleted, by place. A service error (a bad id: 400) comes back in the
// Nats-Service-Error-Code and Nats-Service-Error headers.
async function forget(nc, conv) {
  if (!ID_RULE.test(conv)) throw new Error("conversation id must be 1-128 characters of [A-Za-z0-9_-]");
  const m = await nc.request("compactor.forget", sc.encode(JSON.stringify({ conversation: conv })), { timeout: 75000 });
  const code = m.headers?.get("Nats-Service-Error-Code");
  if (code) throw new Error(`compactor.forget: ${m.headers.get("Nats-Service-Error")} (code ${code})`);
  return JSON.parse(sc.decode(m.data));
}

// shape applies an override (a truncation: head and tail kept, in code points, with a
// marker between) and strips Compactor's metadata. Array content has its text parts
// joined, cut and put back as one text part where the first was; other parts stay.
function shape(msg, o) {
  if (o) {
    const parts = Array.isArray(msg.content) ? msg.content : null;
    const text = parts ? parts.filter((p) => p.type === "text").map((p) => p.text).join("\n") : msg.content ?? "";
    const chars = [...text];
    if (chars.length > o.keep_head + o.keep_tail) {
      const cut = chars.length - o.keep_head - o.keep_tail;
      const kept = chars.slice(0, o.keep_head).join("") +
        `\n[… ${cut} characters cut by Compactor${o.note ? ": " + o.note : ""} …]\n` +
        chars.slice(chars.length - o.keep_tail).join("");
      if (!parts) msg.content = kept;
      else {
        let placed = false;
        msg.content = parts.flatMap((p) => {
          if (p.type !== "text") return [p];
          if (placed) return [];
          placed = true;
          return [{ type: "text", text: kept }];
        });
      }
      delete msg.tokens;
    }
  }
  delete msg.tokens; delete msg.usage; delete msg.context_generation; delete msg.meta;
  return msg;
}

// toolRounds groups the tail into units: a single message, or an assistant message with
// tool calls followed by all its results (messages that landed in between move after it).
function toolRounds(tail, skipped) {
  const units = [];
  for (let i = 0; i < tail.length; ) {
    const { seq, msg } = tail[i];
    if (msg.role === "tool") {
      skipped.push({ seq, reason: `tool result ${msg.tool_call_id} answers no open tool call` });
      i++;
      continue;
    }
    if (msg.role !== "assistant" || !msg.tool_calls?.length) {
      units.push([tail[i]]);
      i++;
      continue;
    }
    const open = new Set(msg.tool_calls.map((c) => c.id));
    const results = [];
    const after = [];
    let j = i + 1;
    for (; j < tail.length && open.size > 0; j++) {
      const m = tail[j].msg;
      if (m.role === "assistant") break;
      if (m.role === "tool" && open.has(m.tool_call_id)) {
        open.delete(m.tool_call_id);
        results.push(tail[j]);
      } else if (m.role === "tool") {
        skipped.push({ seq: tail[j].seq, reason: `tool result ${m.tool_call_id} answers no open tool call` });
      } else after.push(tail[j]);
    }
    if (open.size === 0) units.push([tail[i], ...results, ...after]);
    else {
      skipped.push({ seq, reason: `tool round incomplete: no result yet for ${[...open]}` });
      for (const r of results) skipped.push({ seq: r.seq, reason: "part of an incomplete tool round" });
      for (const a of after) units.push([a]);
    }
    i = j;
  }
  return units;
}

const [cmd, conv] = process.argv.slice(2);
if (!["publish", "context", "forget"].includes(cmd) || !conv) {
  console.error("usage: node compactor.mjs publish|context|forget <conversation>");
  process.exit(2);
}
// Connection settings from the environment, named like Compactor's own without the
// COMPACTOR_ prefix: NATS_URL, one of NATS_USER with NATS_PASSWORD, NATS_TOKEN or
// NATS_CREDS (a credentials file), NATS_CA for TLS, and NATS_INBOX_PREFIX: with the
// accounts.conf of deploy/nats each user may read replies only on _INBOX_<user>.
const env = process.env;
const inboxPrefix = env.NATS_INBOX_PREFIX || undefined;
const options = { servers: env.NATS_URL || "nats://127.0.0.1:4222", inboxPrefix };
if (env.NATS_USER) Object.assign(options, { user: env.NATS_USER, pass: env.NATS_PASSWORD ?? "" });
if (env.NATS_TOKEN) options.token = env.NATS_TOKEN;
if (env.NATS_CREDS) options.authenticator = credsAuthenticator(readFileSync(env.NATS_CREDS));
if (env.NATS_CA) options.tls = { caFile: env.NATS_CA };
const nc = await connect(options);
try {
  if (cmd === "publish") await publish(nc, conv);
  else if (cmd === "forget") console.log(JSON.stringify(await forget(nc, conv)));
  else {
    const { context, skipped, generation } = await readContext(nc, conv);
    for (const m of context) console.log(JSON.stringify(m));
    for (const s of skipped) console.error(`skipped seq ${s.seq}: ${s.reason}`);
    console.error(`${conv}: generation ${generation}, ${context.length} messages`);
  }
} catch (e) {
  console.error(`${cmd} ${conv}: ${e.message}`);
  process.exitCode = 1;
} finally {
  await nc.drain();
}

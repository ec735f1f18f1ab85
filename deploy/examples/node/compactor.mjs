// Compactor from Node.js with the plain NATS client: publish chat messages and read the
// compacted context ("pinned + summary + tail") with the reader algorithm of the README.
//
//   npm install
//   node compactor.mjs publish <conv> < conversation.jsonl
//   node compactor.mjs context <conv>
//   node compactor.mjs forget <conv>     (deletes it everywhere, through the service)
//
// NATS_URL defaults to nats://127.0.0.1:4222 (the embedded server of `compactor serve`).
import { connect, createInbox, StringCodec } from "nats";
import { randomUUID } from "node:crypto";
import { createInterface } from "node:readline";

const SUMMARY_PREFIX =
  "[Summary of the earlier conversation, written by Compactor. The messages it replaces are not shown.]\n\n";
const ID_RULE = /^[A-Za-z0-9_-]{1,128}$/;
const sc = StringCodec();

// Every message gets its own Nats-Msg-Id: this run's random id plus the line number.
// Within the stream's duplicate window (2 minutes) a second message with an id the stream
// has seen is discarded, so an id must never be reused for a different message (another
// run, another line). A retry of the same line sends the same id, so a publish whose
// acknowledgement was lost is stored once.
async function publish(nc, conv) {
  const js = nc.jetstream();
  const run = randomUUID();
  const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
  let n = 0;
  for await (const line of lines) {
    if (!line.trim()) continue;
    n++;
    JSON.parse(line); // refuse malformed JSON before it reaches the stream
    const ack = await publishRetrying(js, `chat.${conv}.msg`, sc.encode(line), `${run}-${n}`);
    if (ack.duplicate) console.error(`line ${n}: stored once at seq ${ack.seq} (a retry of it was discarded)`);
    console.log(ack.seq);
  }
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

// One batched direct get: every message of subject from seq on, up to batch of them,
// answered by any replica and closed by a 204 "EOB" status.
async function directBatch(nc, subject, seq, batch = 256) {
  const inbox = createInbox();
  const sub = nc.subscribe(inbox, { timeout: 10000 });
  nc.publish("$JS.API.DIRECT.GET.CHAT", sc.encode(JSON.stringify({ seq, next_by_subj: subject, batch })), {
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
    out.push({ seq: Number(m.headers.get("Nats-Sequence")), data: sc.decode(m.data) });
  }
  sub.unsubscribe();
  return { msgs: out, more };
}

async function readContext(nc, conv) {
  if (!ID_RULE.test(conv)) throw new Error("conversation id must be 1-128 characters of [A-Za-z0-9_-]");
  // 1. The compaction value (none: the whole history is the tail).
  const kv = await nc.jetstream().views.kv("compaction");
  const entry = await kv.get(conv);
  const value = entry && entry.operation === "PUT" ? entry.json() : null;
  if (value && value.schema_version > 1) throw new Error(`schema_version ${value.schema_version} is newer than this reader`);
  const context = [];
  const skipped = [];
  const overrides = new Map((value?.overrides ?? []).map((o) => [o.seq, o]));
  // 2. Pinned messages (and those a strategy keeps ahead of the summary), by sequence.
  const jsm = await nc.jetstreamManager();
  for (const seq of value?.pinned_seqs ?? []) {
    const sm = await jsm.streams.getMessage("CHAT", { seq });
    context.push(shape(JSON.parse(sc.decode(sm.data)), overrides.get(seq)));
  }
  // 3. The summary as one message.
  if (value?.summary) context.push({ role: value.summary_role || "user", content: SUMMARY_PREFIX + value.summary });
  // 4. The tail, paging with batched direct gets from tail_start_seq.
  const tail = [];
  let from = Math.max(value?.tail_start_seq ?? 1, 1);
  for (;;) {
    const { msgs, more } = await directBatch(nc, `chat.${conv}.msg`, from);
    for (const m of msgs) {
      try {
        tail.push({ seq: m.seq, msg: JSON.parse(m.data) });
      } catch (e) {
        skipped.push({ seq: m.seq, reason: `invalid JSON: ${e.message}` });
      }
    }
    if (!more || msgs.length === 0) break;
    from = msgs[msgs.length - 1].seq + 1;
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
const nc = await connect({ servers: process.env.NATS_URL || "nats://127.0.0.1:4222" });
try {
  if (cmd === "publish") await publish(nc, conv);
  else if (cmd === "forget") console.log(JSON.stringify(await forget(nc, conv)));
  else {
    const { context, skipped, generation } = await readContext(nc, conv);
    for (const m of context) console.log(JSON.stringify(m));
    for (const s of skipped) console.error(`skipped seq ${s.seq}: ${s.reason}`);
    console.error(`${conv}: generation ${generation}, ${context.length} messages`);
  }
} finally {
  await nc.drain();
}

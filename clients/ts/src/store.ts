// The NATS side of the client: batched direct gets, leader reads, the objects bucket,
// publishes. Only the requests a role of deploy/nats/accounts.conf may make are sent
// (no $JS.API.INFO, no stream lookups a reader is not allowed).

import { createHash, randomBytes } from "node:crypto";
import { jetstream, type JetStreamClient } from "@nats-io/jetstream";
import { createInbox, errors as nats, headers, type MsgHdrs, type NatsConnection } from "@nats-io/transport-node";
import {
  CompactorError,
  InvalidError,
  NotFoundError,
  PermissionError,
  TimeoutError,
} from "./errors.js";
import { decodeMessage } from "./message.js";
import { checkBytes, checkInfo, checkOwner, objectMetaSubject, ObjectGap, type ObjectInfo } from "./objects.js";
import type { Entry } from "./rounds.js";
import type { ContentRef } from "./types.js";
import { decodeValue, type ValueView } from "./value.js";
import type { ContextSource, Tombstone } from "./reader.js";

/** Stream, subject and bucket names: the contract's defaults unless a deployment renames them. */
export interface Names {
  chatStream: string;
  chatPrefix: string;
  resultsBucket: string;
  objectsBucket: string;
  /** The forget tombstones, keyed by the SHA-256 (hex) of the conversation id. */
  forgetBucket: string;
  requestsStream: string;
  requestPrefix: string;
  eventsStream: string;
  eventPrefix: string;
  /** The compactor service's name: its endpoints are <service>.compact, ... */
  service: string;
}

export const DEFAULT_NAMES: Readonly<Names> = Object.freeze({
  chatStream: "CHAT",
  chatPrefix: "chat",
  resultsBucket: "compaction",
  objectsBucket: "compaction-objects",
  forgetBucket: "compaction-forgotten",
  requestsStream: "COMPACT_REQUESTS",
  requestPrefix: "compact.request",
  eventsStream: "COMPACT_EVENTS",
  eventPrefix: "compact.event",
  service: "compactor",
});

/** How many messages one batched direct get asks for. */
export const DIRECT_BATCH = 256;
/** What a chat publish keeps of the max payload for its headers, besides the message id. */
export const HEADER_ROOM = 512;
const CHUNK_BATCH = 16;
const MAX_CHUNK = 128 * 1024;
/** The header naming the object on each chunk the clients write (jetstream.ChunkOwnerHeader). */
const CHUNK_OWNER_HEADER = "Compactor-Object";
/** The description's metadata key listing the chunk ids of earlier copies (jetstream.EarlierChunksKey). */
const EARLIER_CHUNKS_KEY = "compactor-earlier-chunks";
const MAX_EARLIER_CHUNKS = 64;
/** How many descriptions of one name a reader looks through for a whole one, and how many of them it reads the chunks of. */
const MAX_DESCRIPTIONS = 1024;
const MAX_TRIED = 8;

/** The chunk ids an object's description names as its own: its current one, then its earlier copies'. */
function chunkIds(info: ObjectInfo): string[] {
  const ids: string[] = [];
  const valid = (id: unknown): id is string => typeof id === "string" && /^[A-Za-z0-9]{1,64}$/.test(id);
  if (valid(info.nuid)) ids.push(info.nuid);
  const more = (info as { metadata?: Record<string, unknown> }).metadata?.[EARLIER_CHUNKS_KEY];
  for (const id of typeof more === "string" ? more.split(/\s+/) : []) {
    if (valid(id) && !ids.includes(id) && ids.length <= MAX_EARLIER_CHUNKS) ids.push(id);
  }
  return ids;
}

/** A message read back from a stream. */
export interface StoredMsg {
  seq: number;
  subject: string;
  time: string;
  headers: Map<string, string>;
  data: Uint8Array;
}

/**
 * The errors of the @nats-io packages an error stands for: itself, then its causes (a
 * request's RequestError has the refusal or the no responders as its cause).
 */
function causes(e: unknown): unknown[] {
  const out: unknown[] = [];
  for (let c = e; c !== undefined && c !== null && out.length < 8; c = (c as { cause?: unknown }).cause) out.push(c);
  return out;
}

/** Whether e, or an error it was caused by, is an instance of cls. */
function causedBy(e: unknown, cls: abstract new (...args: never[]) => Error): boolean {
  return causes(e).some((c) => c instanceof cls);
}

/**
 * Whether no one answered the request e failed: no responders (a JetStream publish that
 * no stream stores is a JetStreamNotEnabled error caused by one).
 */
export function noResponders(e: unknown): boolean {
  return causedBy(e, nats.NoRespondersError);
}

/** Whether e is the @nats-io packages' timeout. */
export function timedOut(e: unknown): boolean {
  return causedBy(e, nats.TimeoutError);
}

/** Turns an error of the @nats-io packages into one of ours. */
export function mapNatsError(e: unknown, what: string): Error {
  if (e instanceof CompactorError) return e;
  if (timedOut(e)) return new TimeoutError(`${what}: no answer in time`, { cause: e });
  const refused = causes(e).find((c) => c instanceof nats.PermissionViolationError);
  if (refused) return new PermissionError(`${what}: ${(refused as Error).message}`, { cause: e });
  if (noResponders(e)) return new NotFoundError(`${what}: no responders`, { cause: e });
  return new CompactorError(`${what}: ${(e as Error | undefined)?.message ?? String(e)}`, { cause: e });
}

function headerMap(h: MsgHdrs | undefined): Map<string, string> {
  const out = new Map<string, string>();
  if (!h) return out;
  for (const [k, vs] of h) if (vs.length > 0) out.set(k, vs[vs.length - 1]!);
  return out;
}

/** Parses a "NATS/1.0\r\nKey: Value\r\n..." header block (a leader get's hdrs). */
function parseHeaderBlock(b: Uint8Array): Map<string, string> {
  const out = new Map<string, string>();
  const lines = Buffer.from(b).toString("utf8").split("\r\n");
  if (!lines[0]?.startsWith("NATS/1.0")) return out;
  for (const l of lines.slice(1)) {
    const i = l.indexOf(":");
    if (i > 0) out.set(l.slice(0, i).trim(), l.slice(i + 1).trim());
  }
  return out;
}

const enc = new TextEncoder();

export class Store {
  /** The JetStream client of every chat publish, made on the first. */
  private publisher: JetStreamClient | undefined;

  constructor(
    readonly nc: NatsConnection,
    readonly names: Names,
    readonly inboxPrefix: string | undefined,
    readonly timeoutMs: number,
  ) {}

  /** chat.<conv>.> : every stored message of one conversation, in every layout. */
  chatFilter(conv: string): string {
    return `${this.names.chatPrefix}.${conv}.>`;
  }

  /**
   * The conversation id of a stored chat subject: chat.<conv>.msg or
   * chat.<conv>.msg.<N>.<p> (2 ≤ N ≤ 256, p < N, no leading zeros); null otherwise.
   */
  conversationOf(subject: string): string | null {
    const prefix = `${this.names.chatPrefix}.`;
    if (!subject.startsWith(prefix)) return null;
    const rest = subject.slice(prefix.length);
    const i = rest.indexOf(".msg");
    if (i < 0) return null;
    const conv = rest.slice(0, i);
    const tail = rest.slice(i + 4);
    if (!/^[A-Za-z0-9_-]{1,128}$/.test(conv)) return null;
    if (tail === "") return conv;
    const m = /^\.(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})$/.exec(tail);
    if (!m) return null;
    const n = Number(m[1]);
    const p = Number(m[2]);
    return n >= 2 && n <= 256 && p < n ? conv : null;
  }

  /**
   * Sends one direct get and collects its answers: up to the end-of-batch marker for a
   * batch, the one answer otherwise. more: the server said messages are still pending.
   */
  async direct(stream: string, request: object | null, what: string, suffix = ""): Promise<{ msgs: StoredMsg[]; more: boolean }> {
    const inbox = createInbox(this.inboxPrefix);
    const sub = this.nc.subscribe(inbox);
    const timer = setTimeout(() => sub.unsubscribe(), this.timeoutMs);
    const single = request === null || !("batch" in request);
    const msgs: StoredMsg[] = [];
    let more = false;
    let done = false;
    try {
      this.nc.publish(`$JS.API.DIRECT.GET.${stream}${suffix}`, request === null ? new Uint8Array(0) : enc.encode(JSON.stringify(request)), {
        reply: inbox,
      });
      for await (const m of sub) {
        const code = m.headers?.code ?? 0;
        if (m.data.length === 0 && code > 0) {
          if (code === 204) more = Number(m.headers!.get("Nats-Num-Pending") || 0) > 0;
          else if (code === 503) throw new NotFoundError(`direct get ${what}: no responders (does stream ${stream} exist, with direct gets allowed?)`);
          else if (code !== 404) throw new CompactorError(`direct get ${what}: status ${code} ${m.headers!.description}`);
          done = true;
          break;
        }
        const seq = Number(m.headers?.get("Nats-Sequence"));
        if (!Number.isSafeInteger(seq) || seq < 1) throw new CompactorError(`direct get ${what}: bad Nats-Sequence header`);
        msgs.push({
          seq,
          subject: m.headers?.get("Nats-Subject") ?? "",
          time: m.headers?.get("Nats-Time-Stamp") ?? "",
          headers: headerMap(m.headers),
          data: m.data,
        });
        if (single) {
          done = true;
          break;
        }
      }
    } catch (e) {
      throw mapNatsError(e, `direct get ${what}`);
    } finally {
      clearTimeout(timer);
      sub.unsubscribe();
    }
    if (!done) {
      throw new TimeoutError(`direct get ${what}: no answer within ${this.timeoutMs} ms (is direct get allowed on ${stream}, and this user's inbox prefix set?)`);
    }
    return { msgs, more };
  }

  /** Asks the stream leader for one message; null when there is none. */
  async leaderGet(stream: string, request: object): Promise<StoredMsg | null> {
    let resp;
    try {
      resp = await this.nc.request(`$JS.API.STREAM.MSG.GET.${stream}`, enc.encode(JSON.stringify(request)), { timeout: this.timeoutMs });
    } catch (e) {
      throw mapNatsError(e, `leader get on ${stream}`);
    }
    let r: { error?: { code?: number; err_code?: number; description?: string }; message?: { subject?: string; seq?: number; hdrs?: string; data?: string; time?: string } };
    try {
      r = JSON.parse(Buffer.from(resp.data).toString("utf8"));
    } catch (e) {
      throw new CompactorError(`leader get on ${stream}: ${(e as Error).message}`);
    }
    if (r.error) {
      if (r.error.err_code === 10037 || r.error.code === 404) return null;
      throw new CompactorError(`leader get on ${stream}: ${r.error.description} (code ${r.error.err_code})`);
    }
    const m = r.message;
    if (!m || typeof m.seq !== "number") throw new CompactorError(`leader get on ${stream}: empty answer`);
    return {
      seq: m.seq,
      subject: m.subject ?? "",
      time: m.time ?? "",
      headers: m.hdrs ? parseHeaderBlock(Buffer.from(m.hdrs, "base64")) : new Map(),
      data: m.data ? new Uint8Array(Buffer.from(m.data, "base64")) : new Uint8Array(0),
    };
  }

  /** The subjects conv has messages on from seq `from` on (one per layout that holds any). */
  async chatSubjects(conv: string, from: number): Promise<string[]> {
    const filter = this.chatFilter(conv);
    const { msgs } = await this.direct(this.names.chatStream, { multi_last: [filter], batch: DIRECT_BATCH }, filter);
    const out: string[] = [];
    for (const m of msgs) {
      if (m.seq < from) continue;
      if (this.conversationOf(m.subject) !== conv) throw new CompactorError(`direct get ${filter}: answered with subject ${JSON.stringify(m.subject)}`);
      if (!out.includes(m.subject)) out.push(m.subject);
    }
    return out;
  }

  /**
   * Reads conv's messages with sequence in [from, upTo] (upTo 0: to the end) with batched
   * direct gets, each subject by its literal name (a read of the wildcard from a later
   * sequence makes the server scan the blocks in between), merged by sequence. past:
   * the answer held a message after upTo.
   */
  async loadConversation(conv: string, from: number, upTo = 0): Promise<{ msgs: StoredMsg[]; past: boolean }> {
    from = Math.max(from, 1);
    const out: StoredMsg[] = [];
    let past = false;
    const subjects = await this.chatSubjects(conv, from);
    for (const subject of subjects) {
      let seq = from;
      for (;;) {
        const { msgs, more } = await this.direct(this.names.chatStream, { seq, next_by_subj: subject, batch: DIRECT_BATCH }, subject);
        let stop = false;
        for (const m of msgs) {
          if (upTo > 0 && m.seq > upTo) {
            past = stop = true;
            break;
          }
          out.push(m);
        }
        if (stop || !more || msgs.length === 0) break;
        seq = msgs[msgs.length - 1]!.seq + 1;
      }
    }
    if (subjects.length > 1) out.sort((a, b) => a.seq - b.seq);
    return { msgs: out, past };
  }

  /** loadConversation answered by the stream leader, one message per request: it sees every acknowledged write. */
  async loadConversationLeader(conv: string, from: number, upTo = 0): Promise<StoredMsg[]> {
    const out: StoredMsg[] = [];
    for (let seq = Math.max(from, 1); upTo === 0 || seq <= upTo; ) {
      const m = await this.leaderGet(this.names.chatStream, { seq, next_by_subj: this.chatFilter(conv) });
      if (!m || (upTo > 0 && m.seq > upTo)) break;
      out.push(m);
      seq = m.seq + 1;
    }
    return out;
  }

  /**
   * The entries of [from, through], where through is a sequence the stream has: what a
   * lagging replica left out is read from the leader.
   */
  async loadEntriesThrough(conv: string, from: number, through: number): Promise<Entry[]> {
    const { msgs, past } = await this.loadConversation(conv, from, through);
    const next = msgs.length > 0 ? msgs[msgs.length - 1]!.seq + 1 : Math.max(from, 1);
    if (next <= through && !past) msgs.push(...(await this.loadConversationLeader(conv, next, through)));
    return msgs.map(toEntry);
  }

  /**
   * The messages at seqs (a value's pinned_seqs). One that left CHAT (the leader
   * confirms it) or belongs to another conversation is an entry with an error.
   */
  async loadPinned(conv: string, seqs: number[]): Promise<Entry[]> {
    const filter = this.chatFilter(conv);
    const out: Entry[] = [];
    for (const seq of seqs) {
      const { msgs } = await this.direct(this.names.chatStream, { seq, next_by_subj: filter, batch: 1 }, filter);
      if (msgs.length > 0 && msgs[0]!.seq === seq) {
        out.push(toEntry(msgs[0]!));
        continue;
      }
      // A replica may lag: only the stream leader says a pinned message is gone.
      const m = await this.leaderGet(this.names.chatStream, { seq, next_by_subj: filter });
      out.push(m && m.seq === seq ? toEntry(m) : missingPinned(seq));
    }
    return out;
  }

  /** The conversation's value (null: never compacted); from the stream leader when asked. */
  async getValue(conv: string, leader: boolean): Promise<ValueView | null> {
    const bucket = this.names.resultsBucket;
    const subject = `$KV.${bucket}.${conv}`;
    let m: StoredMsg | null;
    if (leader) m = await this.leaderGet(`KV_${bucket}`, { last_by_subj: subject });
    else m = (await this.direct(`KV_${bucket}`, null, `${bucket}/${conv}`, `.${subject}`)).msgs[0] ?? null;
    if (!m) return null;
    const op = m.headers.get("KV-Operation");
    if (op === "DEL" || op === "PURGE") return null;
    return decodeValue(Buffer.from(m.data).toString("utf8"), conv);
  }

  /**
   * conv's forget tombstone, null when it was not forgotten within the bucket's TTL;
   * from the stream leader when asked. Its key is the SHA-256 (hex) of the id.
   */
  async getTombstone(conv: string, leader: boolean): Promise<Tombstone | null> {
    const bucket = this.names.forgetBucket;
    const subject = `$KV.${bucket}.${createHash("sha256").update(conv, "utf8").digest("hex")}`;
    let m: StoredMsg | null;
    if (leader) m = await this.leaderGet(`KV_${bucket}`, { last_by_subj: subject });
    else m = (await this.direct(`KV_${bucket}`, { last_by_subj: subject }, `the tombstone of ${conv}`)).msgs[0] ?? null;
    return decodeTombstone(conv, m);
  }

  /** The sequence of conv's newest message, 0 when it has none (the leader's word). */
  async lastSeq(conv: string): Promise<number> {
    const m = await this.leaderGet(this.names.chatStream, { last_by_subj: this.chatFilter(conv) });
    return m?.seq ?? 0;
  }

  private objectsStream(): string {
    return `OBJ_${this.names.objectsBucket}`;
  }

  /** An object's description from the stream leader, and when it was stored. */
  async objectInfo(name: string): Promise<{ info: ObjectInfo; time: string }> {
    const bucket = this.names.objectsBucket;
    const m = await this.leaderGet(this.objectsStream(), { last_by_subj: objectMetaSubject(bucket, name) });
    if (!m) throw new ObjectGap("missing", `${name} of bucket ${bucket} (deleted, purged, aged out or never stored)`, true);
    let info: ObjectInfo;
    try {
      info = JSON.parse(Buffer.from(m.data).toString("utf8"));
    } catch {
      throw new ObjectGap("missing", `${name}: its description does not decode (corrupt)`);
    }
    if (info === null || typeof info !== "object") throw new ObjectGap("missing", `${name}: its description does not decode (corrupt)`);
    if (info.deleted) throw new ObjectGap("missing", `${name} was deleted`);
    return { info, time: m.time };
  }

  /**
   * Fetches the object a stub of conv names: refused before any request when it is
   * another conversation's, another bucket's or too large; never more bytes or chunks
   * than described; checked against its sha256.
   */
  async readObject(conv: string, ref: ContentRef, maxSize: number): Promise<Uint8Array> {
    checkOwner(ref, conv, this.names.objectsBucket, maxSize);
    let gap: ObjectGap;
    for (let attempt = 0; ; attempt++) {
      let info: ObjectInfo;
      try {
        ({ info } = await this.objectInfo(ref.name));
      } catch (e) {
        if (e instanceof ObjectGap && e.noDescription) throw e; // nothing earlier to read
        if (!(e instanceof ObjectGap)) throw e;
        gap = e;
        break;
      }
      try {
        const bytes = await this.readDescribed(info, ref);
        if (bytes === null && attempt === 0) continue; // stored again while read: its new chunks are whole
        if (bytes === null) throw new ObjectGap("missing", `${ref.name} is corrupt: its chunks end before its size`);
        return bytes;
      } catch (e) {
        if (!(e instanceof ObjectGap)) throw e;
        gap = e;
        break;
      }
    }
    // The newest description is not whole (a producer may write any name's): an earlier
    // one of the name that is whole still serves, as the Go reader reads it.
    const earlier = await this.earlierObject(ref);
    if (earlier === null) throw gap;
    return earlier;
  }

  /** The object info describes, checked against ref; null when its chunks end before its size. */
  private async readDescribed(info: ObjectInfo, ref: ContentRef): Promise<Uint8Array | null> {
    checkInfo(info, ref, this.names.objectsBucket);
    const bytes = await this.readChunks(info, ref);
    if (bytes !== null) checkBytes(bytes, ref);
    return bytes;
  }

  /**
   * The object from the newest of the name's earlier descriptions that is whole (the
   * bucket keeps them all: it refuses roll-ups); null when none is. At most
   * MAX_DESCRIPTIONS are looked through, and the chunks of MAX_TRIED read.
   */
  private async earlierObject(ref: ContentRef): Promise<Uint8Array | null> {
    const subject = objectMetaSubject(this.names.objectsBucket, ref.name);
    const descs: StoredMsg[] = [];
    for (let from = 1; descs.length < MAX_DESCRIPTIONS; ) {
      const { msgs, more } = await this.direct(this.objectsStream(), { seq: from, next_by_subj: subject, batch: CHUNK_BATCH }, subject);
      descs.push(...msgs);
      if (!more || msgs.length === 0) break;
      from = msgs[msgs.length - 1]!.seq + 1;
    }
    let tried = 0;
    for (let i = descs.length - 2; i >= 0 && tried < MAX_TRIED; i--) { // the newest was read already
      let info: ObjectInfo;
      try {
        info = JSON.parse(Buffer.from(descs[i]!.data).toString("utf8"));
        if (info === null || typeof info !== "object" || info.deleted) continue;
        checkInfo(info, ref, this.names.objectsBucket);
      } catch {
        continue;
      }
      tried++;
      try {
        const bytes = await this.readDescribed(info, ref);
        if (bytes !== null) return bytes;
      } catch (e) {
        if (!(e instanceof ObjectGap)) throw e;
      }
    }
    return null;
  }

  /** The chunks of an object, batched, then from the leader when a replica ends short; null when they end before its size. */
  private async readChunks(info: ObjectInfo, ref: ContentRef): Promise<Uint8Array | null> {
    const subject = `$O.${this.names.objectsBucket}.C.${info.nuid}`;
    const size = ref.size;
    const parts: Uint8Array[] = [];
    let got = 0;
    let from = 1;
    const add = (m: StoredMsg) => {
      if (parts.length + 1 > info.chunks! || got + m.data.length > size) {
        throw new ObjectGap("missing", `${ref.name} has more than its ${size} bytes in ${info.chunks} chunks`);
      }
      parts.push(m.data);
      got += m.data.length;
      from = m.seq + 1;
    };
    while (got < size) {
      const { msgs, more } = await this.direct(this.objectsStream(), { seq: from, next_by_subj: subject, batch: CHUNK_BATCH }, subject);
      msgs.forEach(add);
      if (!more || msgs.length === 0) break;
    }
    while (got < size) {
      const m = await this.leaderGet(this.objectsStream(), { seq: from, next_by_subj: subject });
      if (!m) return null;
      add(m);
    }
    return Buffer.concat(parts);
  }

  /** The objects bucket's stream settings; NotFoundError when it does not exist. */
  async objectsMaxAgeNanos(): Promise<number> {
    const stream = this.objectsStream();
    let resp;
    try {
      resp = await this.nc.request(`$JS.API.STREAM.INFO.${stream}`, new Uint8Array(0), { timeout: this.timeoutMs });
    } catch (e) {
      throw mapNatsError(e, `stream info ${stream}`);
    }
    const r = JSON.parse(Buffer.from(resp.data).toString("utf8")) as { error?: { code?: number; description?: string }; config?: { max_age?: number } };
    if (r.error) {
      if (r.error.code === 404) {
        throw new NotFoundError(`objects bucket ${this.names.objectsBucket} does not exist (a compactor of this version creates it at start): ${r.error.description}`);
      }
      throw new CompactorError(`stream info ${stream}: ${r.error.description}`);
    }
    return r.config?.max_age ?? 0;
  }

  /**
   * Stores object under name (an object of conversation conv) unless the bucket holds
   * the same bytes already (names are content addressed: a retry stores nothing twice).
   * When the bucket ages objects out, one stored more than a minute ago (half the
   * duplicate window) is stored again, so it outlives the new message that refers to
   * it; so is one stored before a forget of conv (which deletes it). force stores it
   * again whatever the bucket holds. Written as the Go client writes it (see writeObject).
   */
  async putObject(conv: string, name: string, object: Uint8Array, ref: ContentRef, force = false): Promise<void> {
    const maxAge = await this.objectsMaxAgeNanos(); // never let the client create the bucket with other settings
    let earlier: string[] = [];
    try {
      const { info, time } = await this.objectInfo(name);
      earlier = chunkIds(info);
      checkInfo(info, ref, this.names.objectsBucket);
      const at = Date.parse(time);
      if (!force && (maxAge === 0 || Date.now() - at < 60_000) && !(await this.forgottenSince(conv, at))) return;
    } catch (e) {
      if (!(e instanceof ObjectGap)) throw e;
    }
    try {
      await this.writeObject(name, object, earlier);
    } catch (e) {
      throw mapNatsError(e, `store object ${name}`);
    }
  }

  /**
   * Writes object under name in the format of the NATS object store, as the Go client
   * does: its chunks under a fresh chunk id, each naming the object (the
   * Compactor-Object header, which a forget checks), then its description, listing the
   * chunk ids of the name's earlier copies (a forget finds them). Plain publishes: no
   * roll-up (the bucket refuses them) and no purge (a producer may not purge).
   */
  private async writeObject(name: string, object: Uint8Array, earlier: string[]): Promise<void> {
    const bucket = this.names.objectsBucket;
    const stream = this.objectsStream();
    const js = jetstream(this.nc, { timeout: this.timeoutMs });
    const id = randomBytes(16).toString("hex").toUpperCase(); // a plain chunk id
    const size = Math.max(1, Math.min(MAX_CHUNK, this.nc.info!.max_payload - HEADER_ROOM - CHUNK_OWNER_HEADER.length - Buffer.byteLength(name) - 4));
    const hash = createHash("sha256");
    let chunks = 0;
    for (let off = 0; off < object.length; off += size) {
      const part = object.subarray(off, Math.min(off + size, object.length));
      hash.update(part);
      const h = headers();
      h.set(CHUNK_OWNER_HEADER, name);
      await js.publish(`$O.${bucket}.C.${id}`, part, { headers: h, expect: { streamName: stream } });
      chunks++;
    }
    const info: Record<string, unknown> = {
      name, options: { max_chunk_size: size }, bucket, nuid: id, size: object.length, mtime: new Date().toISOString(), chunks,
      digest: `SHA-256=${hash.digest("base64").replaceAll("+", "-").replaceAll("/", "_")}`, // base64url, padded
    };
    if (earlier.length > 0) info.metadata = { [EARLIER_CHUNKS_KEY]: earlier.slice(0, MAX_EARLIER_CHUNKS).join(" ") };
    await js.publish(objectMetaSubject(bucket, name), enc.encode(JSON.stringify(info)), { expect: { streamName: stream } });
  }

  /**
   * Whether conv was forgotten at or after at (ms since the epoch; the server's time of
   * its tombstone), or its tombstone cannot be read: storing an object again is always safe.
   */
  async forgottenSince(conv: string, at: number): Promise<boolean> {
    const bucket = this.names.forgetBucket;
    const subject = `$KV.${bucket}.${createHash("sha256").update(conv, "utf8").digest("hex")}`;
    let m: StoredMsg | null;
    try {
      m = await this.leaderGet(`KV_${bucket}`, { last_by_subj: subject });
    } catch {
      return true;
    }
    if (!m) return false;
    const op = m.headers.get("KV-Operation");
    if (op === "DEL" || op === "PURGE") return false;
    return Date.parse(m.time) >= at;
  }

  /**
   * conv's tombstone when it was written at or after at (ms since the epoch; the
   * server's time), else null; throws when it cannot be read. A publisher whose object
   * was stored (or found stored) from at on asks it once the stub is published: a
   * tombstone that covers the stub took the message too, and its object stays deleted;
   * one before it means the object is stored again.
   */
  async forgetSince(conv: string, at: number): Promise<Tombstone | null> {
    const bucket = this.names.forgetBucket;
    const subject = `$KV.${bucket}.${createHash("sha256").update(conv, "utf8").digest("hex")}`;
    const m = await this.leaderGet(`KV_${bucket}`, { last_by_subj: subject });
    if (!m || Date.parse(m.time) < at) return null;
    return decodeTombstone(conv, m);
  }

  /** Publishes one encoded chat message; the ack's sequence and whether the stream had it already. */
  async publish(conv: string, data: Uint8Array, msgId: string): Promise<{ seq: number; duplicate: boolean }> {
    const subject = `${this.names.chatPrefix}.${conv}.msg`;
    try {
      this.publisher ??= jetstream(this.nc, { timeout: this.timeoutMs });
      const ack = await this.publisher.publish(subject, data, { msgID: msgId, expect: { streamName: this.names.chatStream } });
      return { seq: ack.seq, duplicate: ack.duplicate };
    } catch (e) {
      if (timedOut(e)) {
        throw new TimeoutError(`publish to ${subject}: no acknowledgement in time; the message may be stored: retry with the same msgId (${msgId})`, { cause: e });
      }
      if (noResponders(e)) throw new NotFoundError(`publish to ${subject}: no stream stores it (a compactor creates ${this.names.chatStream} at start)`, { cause: e });
      throw mapNatsError(e, `publish to ${subject}`);
    }
  }

  /** Sends one request to the compactor service. */
  async request(subject: string, body: object, timeoutMs: number) {
    return this.nc.request(subject, enc.encode(JSON.stringify(body)), { timeout: timeoutMs });
  }
}

/** The entry of a pinned sequence that is no longer (or never was) the conversation's. */
export function missingPinned(seq: number): Entry {
  return { seq, error: `pinned message ${seq}: message is not in the conversation's history` };
}

/** Decodes a stored chat message into an entry; a payload that breaks the contract gives an entry with an error. */
export function toEntry(m: StoredMsg): Entry {
  try {
    return { seq: m.seq, message: decodeMessage(m.data) };
  } catch (e) {
    if (e instanceof InvalidError) return { seq: m.seq, error: e.message };
    throw e;
  }
}

/** The reader's source on NATS: batched direct gets, the leader when asked. */
export function natsSource(store: Store, maxObjectSize: number): ContextSource {
  return {
    value: (conv, leader) => store.getValue(conv, leader),
    pinned: (conv, seqs) => store.loadPinned(conv, seqs),
    tail: async (conv, from, leader) =>
      (leader ? await store.loadConversationLeader(conv, from) : (await store.loadConversation(conv, from)).msgs).map(toEntry),
    object: (conv, ref) => store.readObject(conv, ref, maxObjectSize),
    tombstone: (conv, leader) => store.getTombstone(conv, leader),
  };
}

/** The tombstone m holds of conv: null for a delete or purge marker; throws when it does not decode. */
function decodeTombstone(conv: string, m: StoredMsg | null): Tombstone | null {
  if (!m) return null;
  const op = m.headers.get("KV-Operation");
  if (op === "DEL" || op === "PURGE") return null;
  let t: Partial<Tombstone>;
  try {
    t = JSON.parse(Buffer.from(m.data).toString("utf8"));
  } catch {
    throw new CompactorError(`the tombstone of ${conv} does not decode`);
  }
  if (typeof t?.through_seq !== "number" || !Number.isSafeInteger(t.through_seq) || t.through_seq < 0) {
    throw new CompactorError(`the tombstone of ${conv} has no valid through_seq`);
  }
  return { through_seq: t.through_seq, forgotten_at: String(t.forgotten_at ?? "") };
}

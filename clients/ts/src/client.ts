// The client a TypeScript service uses: publish chat messages, read the compacted
// context, ask the compactor service for compactions, status, policies, recall and
// forgetting.

import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { jetstream, type ConsumerMessages } from "@nats-io/jetstream";
import { connect, credsAuthenticator, type NatsConnection, type NodeConnectionOptions } from "@nats-io/transport-node";
import {
  BusyError,
  CompactorError,
  ConflictError,
  InvalidError,
  NoServiceError,
  NotFoundError,
  ServiceError,
  TimeoutError,
  PublishBatchError,
  ToolResultWithoutCallError,
  TooLargeError,
} from "./errors.js";
import { checkMessageEncoded, encodeMessageBytes, hasToolCalls, validateConversationId } from "./message.js";
import { MAX_OBJECT_SIZE, offload } from "./objects.js";
import type { Entry } from "./rounds.js";
import { DEFAULT_NAMES, HEADER_ROOM, mapNatsError, natsSource, noResponders, Store, type Names } from "./store.js";
import { liveValue, readContext, type Tombstone } from "./reader.js";
import type { Counter } from "./tokens.js";
import type {
  CompactionEvent,
  CompactionValue,
  CompactResponse,
  ContentRef,
  Context,
  ConversationStatus,
  ForgetResponse,
  Message,
  PolicyResponse,
  RecallResponse,
} from "./types.js";
import {
  ANSWER_RECALL_MAX_TOKENS,
  checkRecallOptions,
  decodeRecallArguments,
  DEFAULT_RECALL_MAX_TOKENS,
  MAX_RECALL_MAX_TOKENS,
  type RecallOptions,
} from "./tool.js";

/** Options of a Compactor client. */
export interface CompactorOptions {
  /** Stream, subject and bucket names, when a deployment renamed them. */
  names?: Partial<Names>;
  /**
   * The inbox prefix of the connection (the inboxPrefix of its connect options). With
   * deploy/nats/accounts.conf each user may read replies only on _INBOX_<user>: direct
   * gets are answered there. Read from the connection when not given.
   */
  inboxPrefix?: string;
  /** How long one NATS request may take, in milliseconds (default 10,000). */
  timeoutMs?: number;
  /** The largest object a message's content may be stored as (default 16 MiB). */
  maxObjectSize?: number;
}

/** Options of Compactor.connect: where and how to connect, plus the client's options. */
export interface ConnectOptions extends CompactorOptions {
  /** nats://host:port, or several (default nats://127.0.0.1:4222, `compactor serve`'s embedded server). */
  servers?: string | string[];
  user?: string;
  pass?: string;
  token?: string;
  /** A credentials file (JWT and NKey seed). */
  credsFile?: string;
  /** A CA certificate file for TLS. */
  caFile?: string;
  /** Anything else the connect of @nats-io/transport-node takes. */
  nats?: Partial<NodeConnectionOptions>;
}

/**
 * Connection options from the environment, named like Compactor's own without the
 * COMPACTOR_ prefix: NATS_URL, NATS_USER with NATS_PASSWORD, NATS_TOKEN or NATS_CREDS,
 * NATS_CA, NATS_INBOX_PREFIX. NATS_USER without NATS_PASSWORD (unset or empty) is a
 * token, in place of NATS_TOKEN, as the nats CLI and `compactor` read these variables.
 */
export function connectOptionsFromEnv(env: Record<string, string | undefined> = process.env): ConnectOptions {
  const o: ConnectOptions = { servers: env["NATS_URL"] || "nats://127.0.0.1:4222" };
  const user = env["NATS_USER"];
  const password = env["NATS_PASSWORD"];
  // A user with an empty password would be refused by a server that expects the
  // token the same environment gives the Go CLI and the nats CLI.
  const token = user && !password ? user : env["NATS_TOKEN"];
  if (user && password) [o.user, o.pass] = [user, password];
  if (token) o.token = token;
  if (env["NATS_CREDS"]) o.credsFile = env["NATS_CREDS"];
  if (env["NATS_CA"]) o.caFile = env["NATS_CA"];
  if (env["NATS_INBOX_PREFIX"]) o.inboxPrefix = env["NATS_INBOX_PREFIX"];
  return o;
}

/** The outcome of a publish. */
export interface PublishResult {
  /** The CHAT sequence: pass it to context's atLeastSeq to read your own write. */
  seq: number;
  /** The Nats-Msg-Id it was sent with: retry with it to store the message once. */
  msgId: string;
  /** The stream had the message already (a retry within the duplicate window). */
  duplicate: boolean;
}

export interface PublishOptions {
  /**
   * Nats-Msg-Id: unique per message across the whole CHAT stream (default: a random
   * UUID). Pass the id of an earlier attempt only to retry that message.
   */
  msgId?: string;
}

/** One message of publishBatch: its conversation, the message and, optionally, its Nats-Msg-Id. */
export interface BatchMessage {
  conv: string;
  message: Message;
  /** As PublishOptions.msgId (default: a random UUID): the same id to publish the batch again. */
  msgId?: string;
}

export interface PublishBatchOptions {
  /** The most publishes waiting for their acknowledgements at once (default 1000, at most 2000). */
  window?: number;
}

/** A message checked, paired and encoded, ready to send. */
interface Prepared {
  m: Message;
  data: Uint8Array;
  msgId: string;
  /** The object of a message over the max payload, and when the client began storing it (ms since the epoch). */
  object?: { name: string; bytes: Uint8Array; ref: ContentRef; storedFrom: number };
}

export interface PublishAllOptions {
  /** The ids are <prefix>-1, <prefix>-2, ... (default: a random UUID). A fresh prefix per input. */
  msgIdPrefix?: string;
  /** Attempts per message when no acknowledgement comes (default 5), with the same id. */
  attempts?: number;
}

export interface ContextOptions {
  /** Include this sequence (one a publish returned): read-your-writes. */
  atLeastSeq?: number;
  /** "openai" (default): Compactor's metadata stripped; "raw": kept. */
  format?: "openai" | "raw";
  /** Cut the context at read time to fit this many tokens (deterministic; flagged degraded). */
  maxTokens?: number;
  /** Wait up to this long for a compaction that is pending, then read. */
  waitPendingMs?: number;
  /** Counts tokens for Context.tokens and maxTokens (default chars/4). */
  counter?: Counter;
}

export interface CompactOptions {
  /** Extra wishes for the summarizer (data, never overriding its rules), at most 8192 bytes. */
  instructions?: string;
  /** Names the request (1-128 characters of [A-Za-z0-9_-]); the same id again is a retry. */
  requestId?: string;
  /** Wait up to this long for the outcome (the service caps it, 5 minutes by default). */
  waitMs?: number;
}

/** A reading of the service's policy endpoint, bound to a client. */
export interface PolicyApi {
  /** The conversation's policy and the settings it resolves to. */
  get(conv: string): Promise<PolicyResponse>;
  /** Merges keys into the policy (a string or a number each; "" removes a key). */
  set(conv: string, settings: Record<string, string | number>): Promise<PolicyResponse>;
  /** Removes the conversation's policy. */
  clear(conv: string): Promise<PolicyResponse>;
}

/** How long a service call waits beyond its own wait. */
const SERVICE_TIMEOUT_MS = 15_000;
/** A forget deletes from every stream and lists the objects bucket. */
const FORGET_TIMEOUT_MS = 75_000;
const MAX_TRACKED_CONVERSATIONS = 10_000;
const MAX_INSTRUCTIONS_BYTES = 8192;

interface OpenCalls {
  answered: Map<string, boolean>; // call id → answered
}

/**
 * The Compactor client. It is safe to share between concurrent calls.
 *
 *   const c = await Compactor.connect(connectOptionsFromEnv());
 *   const { seq } = await c.publish("conv-1", { role: "user", content: "hi" });
 *   const cx = await c.context("conv-1", { atLeastSeq: seq });
 *   // send cx.messages to the model
 */
export class Compactor {
  readonly names: Names;
  private readonly store: Store;
  private readonly maxObjectSize: number;
  private readonly timeoutMs: number;
  private owned = false;
  private readonly calls = new Map<string, OpenCalls>(); // insertion order: least recently used first

  constructor(
    readonly nc: NatsConnection,
    opts: CompactorOptions = {},
  ) {
    this.names = { ...DEFAULT_NAMES, ...opts.names };
    this.timeoutMs = opts.timeoutMs ?? 10_000;
    this.maxObjectSize = opts.maxObjectSize ?? MAX_OBJECT_SIZE;
    const prefix = opts.inboxPrefix ?? (nc as unknown as { options?: { inboxPrefix?: string } }).options?.inboxPrefix;
    this.store = new Store(nc, this.names, prefix || undefined, this.timeoutMs);
  }

  /** Connects to NATS and returns a client that owns the connection (close drains it). */
  static async connect(opts: ConnectOptions = {}): Promise<Compactor> {
    const o: NodeConnectionOptions = { servers: opts.servers ?? "nats://127.0.0.1:4222", ...opts.nats };
    if (opts.inboxPrefix) o.inboxPrefix = opts.inboxPrefix;
    if (opts.user) [o.user, o.pass] = [opts.user, opts.pass ?? ""];
    if (opts.token) o.token = opts.token;
    if (opts.credsFile) o.authenticator = credsAuthenticator(readFileSync(opts.credsFile));
    if (opts.caFile) o.tls = { caFile: opts.caFile };
    let nc: NatsConnection;
    try {
      nc = await connect(o);
    } catch (e) {
      throw mapNatsError(e, `connect to ${String(o.servers)}`);
    }
    const c = new Compactor(nc, opts);
    c.owned = true;
    return c;
  }

  /** Drains the connection when this client opened it (Compactor.connect). */
  async close(): Promise<void> {
    if (this.owned && !this.nc.isClosed()) await this.nc.drain();
  }

  /**
   * Validates a message and appends it to the conversation. A tool message must answer
   * an open call of the conversation's newest tool round. A message over the server's
   * max payload is stored as an object and published as a stub.
   */
  async publish(conv: string, message: Message, opts: PublishOptions = {}): Promise<PublishResult> {
    const p = await this.prepare(conv, message, opts);
    return this.send(conv, p);
  }

  /**
   * Publishes messages of one conversation or many, each checked as publish checks it,
   * in their order, with up to `window` of them (default 1000) waiting for their
   * acknowledgements at once: each conversation's messages are stored in their order
   * in the batch. The results are in the batch's order. The first message that fails
   * stops the batch: nothing after it is sent, those in flight are waited for, and a
   * PublishBatchError names it (its index, conversation and cause) and holds the
   * results of the messages stored (undefined for the others). A message the client
   * refuses (InvalidError) leaves every message before it stored and none after it; one
   * the stream refused, or did not acknowledge in time, may have later messages in
   * flight, which may be stored. Give each message a msgId to publish the whole batch
   * again after an error: what was stored is not stored twice.
   */
  async publishBatch(messages: BatchMessage[], opts: PublishBatchOptions = {}): Promise<PublishResult[]> {
    const window = Math.max(1, Math.min(opts.window ?? 1000, 2000));
    const results: (PublishResult | undefined)[] = new Array(messages.length);
    const inFlight: { i: number; conv: string; ack: Promise<PublishResult> }[] = [];
    let failed: PublishBatchError | undefined;
    const fail = (i: number, conv: string, cause: unknown) => {
      if (!failed || i < failed.index) failed = new PublishBatchError(i, conv, cause, results);
    };
    const settleOldest = async () => {
      const f = inFlight.shift()!;
      try {
        results[f.i] = await f.ack;
      } catch (e) {
        fail(f.i, f.conv, e);
      }
    };
    for (const [i, { conv, message, msgId }] of messages.entries()) {
      if (inFlight.length >= window) await settleOldest();
      if (failed) break;
      try {
        const p = await this.prepare(conv, message, { msgId });
        const ack = this.send(conv, p);
        ack.catch(() => {}); // awaited in order by settleOldest
        inFlight.push({ i, conv, ack });
      } catch (e) {
        fail(i, conv, e);
        break;
      }
    }
    while (inFlight.length > 0) await settleOldest();
    if (failed) throw failed;
    return results as PublishResult[];
  }

  /** Checks a message against the wire contract and its conversation, and encodes it (offloading it when too large). */
  private async prepare(conv: string, message: Message, opts: PublishOptions): Promise<Prepared> {
    validateConversationId(conv);
    const msgId = opts.msgId ?? randomUUID();
    if (msgId === "") throw new InvalidError("msgId", "must not be empty");
    const { message: m, data: encoded } = checkMessageEncoded(message);
    if (m.content_ref !== undefined) {
      throw new InvalidError("content_ref", "is set by the client for a message over the max payload; publish the whole message");
    }
    try {
      await this.checkToolPairing(conv, m);
    } catch (e) {
      // A retry with the same msgId of a tool result that was stored (its ack lost) is
      // the stream's to de-duplicate: it answers with the first copy's sequence.
      if (!(e instanceof ToolResultWithoutCallError && e.answered && opts.msgId !== undefined)) throw e;
    }
    try {
      const limit = this.inlineLimit(msgId);
      if (encoded.length <= limit) return { m, data: encoded, msgId };
      const { data, object } = await this.offload(conv, m, encoded.length, limit);
      return { m, data, msgId, object };
    } catch (e) {
      // What the pairing check learnt from m is not true of the stream: the next check reads it.
      this.forgetCalls(conv, m);
      throw e;
    }
  }

  /** Sends a prepared message; its result once the stream acknowledges it. */
  private async send(conv: string, p: Prepared): Promise<PublishResult> {
    let out: PublishResult;
    try {
      const { seq, duplicate } = await this.store.publish(conv, p.data, p.msgId);
      out = { seq, msgId: p.msgId, duplicate };
    } catch (e) {
      this.forgetCalls(conv, p.m);
      throw e;
    }
    await this.keepObject(conv, out.seq, p);
    return out;
  }

  /**
   * Stores the object of a message over the max payload again when a forget of conv
   * began while it was published (its tombstone newer than the store began, with a
   * minute's margin for the clocks): that forget may have deleted the object (found
   * stored already, or stored before the tombstone) after the client stored it, and the
   * new message would lose its content. Stored again, it is newer than the tombstone,
   * which the forget leaves. Unless the tombstone covers the stub (at seq): that forget
   * took the message too, and its content must not outlive it. As the Go client's
   * Publish does.
   */
  private async keepObject(conv: string, seq: number, p: Prepared): Promise<void> {
    const o = p.object;
    if (!o) return;
    let tomb: Tombstone | null;
    try {
      tomb = await this.store.forgetSince(conv, o.storedFrom - 60_000);
    } catch (e) {
      throw new CompactorError(
        `the message is stored, but whether a forget of ${conv} deleted its object meanwhile cannot be told (publish it again with the same msgId ${p.msgId}): ${(e as Error).message}`,
        { cause: e },
      );
    }
    if (!tomb || seq <= tomb.through_seq) return;
    try {
      await this.store.putObject(conv, o.name, o.bytes, o.ref, true);
    } catch (e) {
      throw new CompactorError(
        `the message is stored, but its object may be lost to the forget of ${conv} that ran meanwhile (publish it again with the same msgId ${p.msgId}): ${(e as Error).message}`,
        { cause: e },
      );
    }
  }

  /**
   * Publishes messages in order with the ids <prefix>-1, <prefix>-2, ..., retrying a
   * message whose acknowledgement did not come with its own id (stored once).
   */
  async publishAll(conv: string, messages: Message[], opts: PublishAllOptions = {}): Promise<PublishResult[]> {
    const prefix = opts.msgIdPrefix ?? randomUUID();
    const attempts = opts.attempts ?? 5;
    const out: PublishResult[] = [];
    for (const [i, m] of messages.entries()) {
      const msgId = `${prefix}-${i + 1}`;
      for (let attempt = 1; ; attempt++) {
        try {
          out.push(await this.publish(conv, m, { msgId }));
          break;
        } catch (e) {
          // No acknowledgement, or no responders (a stream electing its leader): the
          // message may or may not be stored; the same id makes the retry safe.
          const noStream = e instanceof NotFoundError && noResponders(e.cause);
          if (!(e instanceof TimeoutError || noStream) || attempt >= attempts) throw e;
          await new Promise((r) => setTimeout(r, 250 * 2 ** attempt));
        }
      }
    }
    return out;
  }

  /** The longest encoded message a publish with this id sends as it is. */
  private inlineLimit(msgId: string): number {
    return (this.nc.info?.max_payload ?? 1 << 20) - HEADER_ROOM - Buffer.byteLength(msgId);
  }

  private async offload(conv: string, m: Message, size: number, limit: number): Promise<{ data: Uint8Array; object: Prepared["object"] }> {
    const max = this.nc.info?.max_payload ?? 1 << 20;
    const { stub, object, ref } = offload(m, conv, this.names.objectsBucket);
    const data = encodeMessageBytes(stub);
    if (data.length > limit) {
      throw new TooLargeError(
        `message too large: the message is ${size} bytes, over the limit of ${limit} bytes (the server's max_payload ${max} less ${max - limit} for headers), ` +
          `and still ${data.length} bytes with its content stored as an object: its tool calls, name and metadata must fit in the limit`,
      );
    }
    if (object.length > this.maxObjectSize) {
      throw new TooLargeError(
        `message too large: the message is ${size} bytes, over the limit of ${limit} bytes (the server's max_payload), ` +
          `and its content of ${object.length} bytes is over the max object size of ${this.maxObjectSize} bytes`,
      );
    }
    const storedFrom = Date.now();
    await this.store.putObject(conv, ref.name, object, ref);
    return { data, object: { name: ref.name, bytes: object, ref, storedFrom } };
  }

  private async checkToolPairing(conv: string, m: Message): Promise<void> {
    if (hasToolCalls(m)) {
      this.remember(conv, { answered: new Map(m.tool_calls!.map((c) => [c.id, false])) });
      return;
    }
    if (m.role === "assistant") {
      this.remember(conv, { answered: new Map() });
      return;
    }
    if (m.role !== "tool") return;
    const id = m.tool_call_id ?? "";
    // The client's own view settles the common case (it published the call); an id it
    // does not know may belong to a round another client published: the stream decides.
    const known = this.calls.get(conv);
    if (known) {
      this.remember(conv, known);
      if (known.answered.has(id)) return this.answer(known, id);
    }
    const oc = await this.openCallsFromStream(conv);
    this.remember(conv, oc);
    this.answer(oc, id);
  }

  private answer(oc: OpenCalls, id: string): void {
    const answered = oc.answered.get(id);
    if (answered === undefined) {
      throw new ToolResultWithoutCallError(`${JSON.stringify(id)} answers no tool call of the conversation's newest assistant tool round`, false);
    }
    if (answered) throw new ToolResultWithoutCallError(`tool call ${JSON.stringify(id)} was already answered`, true);
    oc.answered.set(id, true);
  }

  /** Reads the conversation's tail, through the newest message the leader knows, for its newest tool round. */
  private async openCallsFromStream(conv: string): Promise<OpenCalls> {
    const v = await this.store.getValue(conv, true);
    const from = v ? v.tailStartSeq : 1;
    const last = await this.store.lastSeq(conv);
    const es: Entry[] = last >= from ? await this.store.loadEntriesThrough(conv, from, last) : [];
    let answered = new Map<string, boolean>();
    for (const e of es) {
      const m = e.message;
      if (e.error !== undefined || !m) continue;
      if (hasToolCalls(m)) answered = new Map(m.tool_calls!.map((c) => [c.id, false]));
      else if (m.role === "tool") {
        if (answered.has(m.tool_call_id ?? "")) answered.set(m.tool_call_id ?? "", true);
      } else if (m.role === "assistant") answered = new Map();
    }
    return { answered };
  }

  private remember(conv: string, oc: OpenCalls): void {
    this.calls.delete(conv);
    this.calls.set(conv, oc);
    while (this.calls.size > MAX_TRACKED_CONVERSATIONS) this.calls.delete(this.calls.keys().next().value!);
  }

  private forgetCalls(conv: string, m: Message): void {
    if (m.role === "tool" || m.role === "assistant") this.calls.delete(conv);
  }

  /**
   * Reads "pinned + summary + tail" for a conversation with the reader algorithm of
   * the README, the same as the Go client's Context.
   */
  async context(conv: string, opts: ContextOptions = {}): Promise<Context> {
    validateConversationId(conv);
    const atLeast = opts.atLeastSeq ?? 0;
    if (!Number.isSafeInteger(atLeast) || atLeast < 0) throw new InvalidError("atLeastSeq", "must be a non-negative integer");
    if (opts.waitPendingMs && opts.waitPendingMs > 0) await this.waitPending(conv, opts.waitPendingMs);
    return readContext(natsSource(this.store, this.maxObjectSize), conv, {
      atLeastSeq: atLeast,
      raw: opts.format === "raw",
      maxTokens: opts.maxTokens,
      counter: opts.counter,
    });
  }

  /** The conversation's current compaction value (null when never compacted, or when a forget covers it). */
  async value(conv: string): Promise<CompactionValue | null> {
    validateConversationId(conv);
    return (await liveValue(natsSource(this.store, this.maxObjectSize), conv, false)).v?.value ?? null;
  }

  /** Waits up to ms for the outcome of the conversation's pending request, if any. */
  private async waitPending(conv: string, ms: number): Promise<void> {
    const m = await this.store.leaderGet(this.names.requestsStream, { last_by_subj: `${this.names.requestPrefix}.${conv}` });
    if (!m) return;
    let req: { request_id?: unknown; conversation?: unknown };
    try {
      req = JSON.parse(Buffer.from(m.data).toString("utf8"));
    } catch (e) {
      throw new CompactorError(`decode the pending request of ${conv}: ${(e as Error).message}`);
    }
    if (typeof req?.request_id !== "string" || req.request_id === "" || req.conversation !== conv) {
      throw new CompactorError(`the pending request of ${conv} does not name it`);
    }
    try {
      await this.waitForOutcome(conv, req.request_id, { timeoutMs: ms });
    } catch (e) {
      if (!(e instanceof TimeoutError)) throw e; // running out of time is not an error: read as it is
    }
  }

  /**
   * Waits for the completed, declined or failed event of a request (or a forgotten event
   * after its requested one). Events already stored are read too, so an outcome that
   * came first is not missed.
   */
  async waitForOutcome(conv: string, requestId: string, opts: { timeoutMs?: number } = {}): Promise<CompactionEvent> {
    validateConversationId(conv);
    const subject = `${this.names.eventPrefix}.${conv}`;
    const timeoutMs = opts.timeoutMs ?? 60_000;
    const js = jetstream(this.nc, { timeout: this.timeoutMs });
    let iter: ConsumerMessages;
    try {
      const consumer = await js.consumers.get(this.names.eventsStream, { filter_subjects: [subject] });
      iter = await consumer.consume();
    } catch (e) {
      throw mapNatsError(e, `watch events of ${conv}`);
    }
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      iter.stop();
    }, timeoutMs);
    try {
      let requested = false;
      for await (const m of iter) {
        let ev: CompactionEvent;
        try {
          ev = JSON.parse(Buffer.from(m.data).toString("utf8"));
        } catch {
          continue; // an invalid event is no outcome
        }
        if (ev === null || typeof ev !== "object" || ev.conversation !== conv || m.subject !== subject) continue;
        requested ||= ev.request_id === requestId && ev.type === "requested";
        const outcome = ev.type === "completed" || ev.type === "declined" || ev.type === "failed";
        if ((ev.request_id === requestId && outcome) || (ev.type === "forgotten" && requested)) return ev;
      }
    } catch (e) {
      if (!timedOut) throw mapNatsError(e, `watch events of ${conv}`);
    } finally {
      clearTimeout(timer);
      iter.stop();
    }
    throw new TimeoutError(`no outcome of request ${requestId} of ${conv} within ${timeoutMs} ms`);
  }

  /**
   * Asks the compactor service (compactor.compact) for a manual compaction. It answers
   * queued, or with waitMs the outcome: completed (with the new value), declined or
   * failed. Busy (a request already pending: this one was NOT queued, pendingRequestId
   * names the pending one) is a BusyError, and so is a 503 (the service is stopping, or
   * has no free wait slot: nothing queued, no pendingRequestId; retry later).
   */
  async compact(conv: string, opts: CompactOptions = {}): Promise<CompactResponse> {
    validateConversationId(conv);
    if (opts.requestId !== undefined) {
      try {
        validateConversationId(opts.requestId);
      } catch (e) {
        throw new InvalidError("request_id", (e as InvalidError).rule);
      }
    }
    const instructions = opts.instructions ?? "";
    if (Buffer.byteLength(instructions) > MAX_INSTRUCTIONS_BYTES) {
      throw new InvalidError("instructions", `is ${Buffer.byteLength(instructions)} bytes long; at most ${MAX_INSTRUCTIONS_BYTES} are allowed`);
    }
    const waitMs = opts.waitMs ?? 0;
    if (!Number.isFinite(waitMs) || waitMs < 0) throw new InvalidError("wait_ms", "must not be negative (0: do not wait)");
    const body: Record<string, unknown> = { conversation: conv };
    if (opts.requestId) body["request_id"] = opts.requestId;
    if (instructions) body["instructions"] = instructions;
    if (waitMs > 0) body["wait_ms"] = Math.max(1, Math.ceil(waitMs));
    const r = (await this.call("compact", body, waitMs + SERVICE_TIMEOUT_MS)) as CompactResponse;
    if (r.status === "busy") throw new BusyError(r.error ?? `a compaction of ${conv} is already pending; this request was not queued`, r.request_id);
    return r;
  }

  /** One conversation's state (compactor.status): its value, last sequence and pending request. */
  async status(conv: string): Promise<ConversationStatus>;
  /** Without a conversation: the pipeline's streams and consumers. */
  async status(): Promise<Record<string, unknown>>;
  async status(conv?: string): Promise<ConversationStatus | Record<string, unknown>> {
    if (conv === undefined) return (await this.call("status", {}, SERVICE_TIMEOUT_MS)) as Record<string, unknown>;
    validateConversationId(conv);
    return (await this.call("status", { conversation: conv }, SERVICE_TIMEOUT_MS)) as ConversationStatus;
  }

  /** Where a conversation's context starts (compactor.context): its value and sequences, not the messages. */
  async contextPointer(conv: string): Promise<{ conversation: string; value: CompactionValue | null; tail_start_seq: number; last_seq: number }> {
    validateConversationId(conv);
    return (await this.call("context", { conversation: conv }, SERVICE_TIMEOUT_MS)) as never;
  }

  /** The conversation's policy (compactor.policy): get, set or clear. */
  readonly policy: PolicyApi = {
    get: async (conv) => {
      validateConversationId(conv);
      return (await this.call("policy", { conversation: conv }, SERVICE_TIMEOUT_MS)) as PolicyResponse;
    },
    set: async (conv, settings) => {
      validateConversationId(conv);
      for (const [k, v] of Object.entries(settings ?? {})) {
        if (typeof v !== "string" && !(typeof v === "number" && Number.isFinite(v))) {
          throw new InvalidError(`set.${k}`, 'must be a string or a number ("" removes the key)');
        }
      }
      return (await this.call("policy", { conversation: conv, set: settings }, SERVICE_TIMEOUT_MS)) as PolicyResponse;
    },
    clear: async (conv) => {
      validateConversationId(conv);
      return (await this.call("policy", { conversation: conv, clear: true }, SERVICE_TIMEOUT_MS)) as PolicyResponse;
    },
  };

  /**
   * Asks the compactor service (compactor.forget) to delete a conversation everywhere,
   * for good. Forgetting one with nothing stored is no error (every count is 0).
   */
  async forget(conv: string): Promise<ForgetResponse> {
    validateConversationId(conv);
    return (await this.call("forget", { conversation: conv }, FORGET_TIMEOUT_MS)) as ForgetResponse;
  }

  /**
   * Raw messages of a conversation, each with its CHAT sequence (compactor.recall): those
   * in [fromSeq, toSeq] that hold query (ignoring case), newest first within maxTokens
   * (default 4000), a tool call with all its results or not at all. The service reads
   * CHAT and keeps its answer under the max payload (cut_by_payload says it cut). A
   * conversation with nothing stored is a NotFoundError.
   */
  async recall(conv: string, opts: RecallOptions = {}): Promise<RecallResponse> {
    validateConversationId(conv);
    checkRecallOptions(opts);
    const body: Record<string, unknown> = { conversation: conv };
    if (opts.query) body["query"] = opts.query;
    if (opts.fromSeq) body["from_seq"] = opts.fromSeq;
    if (opts.toSeq) body["to_seq"] = opts.toSeq;
    if (opts.maxTokens) body["max_tokens"] = opts.maxTokens;
    return (await this.call("recall", body, SERVICE_TIMEOUT_MS)) as RecallResponse;
  }

  /**
   * Answers a model's call of the recall tool (RECALL_TOOL) in conversation conv:
   * args is the call's arguments text; the answer is the content of the tool message
   * to send back. Arguments that break a rule are answered as {"error": "..."}, so the
   * model can correct its call; other failures throw. The budget is capped at maxTokens
   * (0 or left out: ANSWER_RECALL_MAX_TOKENS, 8000): a call that asks for more gets the
   * cap and asked_max_tokens in the answer; one that asks for nothing gets 4000, or the
   * cap when that is lower.
   */
  async answerRecall(conv: string, args: string, maxTokens = 0): Promise<string> {
    validateConversationId(conv);
    if (!Number.isSafeInteger(maxTokens) || maxTokens < 0 || maxTokens > MAX_RECALL_MAX_TOKENS) {
      throw new InvalidError("max_tokens", `the cap of answerRecall must be between 0 (the default, ${ANSWER_RECALL_MAX_TOKENS}) and ${MAX_RECALL_MAX_TOKENS}`);
    }
    const cap = maxTokens || ANSWER_RECALL_MAX_TOKENS;
    let opts: RecallOptions;
    try {
      opts = decodeRecallArguments(args);
    } catch (e) {
      if (e instanceof InvalidError) return JSON.stringify({ error: e.message });
      throw e;
    }
    const asked = opts.maxTokens ?? 0;
    const r = await this.recall(conv, { ...opts, maxTokens: Math.min(asked || DEFAULT_RECALL_MAX_TOKENS, cap) });
    return JSON.stringify(asked > cap ? { ...r, asked_max_tokens: asked } : r);
  }

  /** Sends one request to an endpoint of the compactor service and decodes its answer. */
  private async call(endpoint: string, body: object, timeoutMs: number): Promise<unknown> {
    const subject = `${this.names.service}.${endpoint}`;
    let m;
    try {
      m = await this.store.request(subject, body, timeoutMs);
    } catch (e) {
      if (noResponders(e)) {
        throw new NoServiceError(`no compactor service answered on ${subject}: run \`compactor serve\` (any COMPACTOR_ROLES) against this NATS`, { cause: e });
      }
      throw mapNatsError(e, subject);
    }
    const code = m.headers?.get("Nats-Service-Error-Code");
    if (code) {
      const description = m.headers?.get("Nats-Service-Error") ?? "";
      const n = Number(code);
      if (n === 400) {
        const i = description.indexOf(": ");
        throw i > 0 ? new InvalidError(description.slice(0, i), description.slice(i + 2)) : new InvalidError("request", description);
      }
      if (n === 404) throw new NotFoundError(`${subject}: ${description}`);
      if (n === 409) throw new ConflictError(`${subject}: ${description}`);
      // As Go's ServiceError.Is matches a 503 to ErrBusy: nothing was done, retry later.
      if (n === 503) throw new BusyError(`${subject}: ${description} (code 503)`);
      throw new ServiceError(subject, n, description);
    }
    try {
      return JSON.parse(Buffer.from(m.data).toString("utf8"));
    } catch (e) {
      throw new CompactorError(`${subject}: undecodable answer: ${(e as Error).message}`);
    }
  }
}

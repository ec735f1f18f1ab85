// The reader algorithm (README, "Reading context from another language, step by step")
// over a source of stored data: NATS in the client, a fixture's data in the shared
// conformance tests (schemas/testdata/reader), so both run the same steps.

import { assemble, type AssembleOptions } from "./assemble.js";
import { NotCoveredError } from "./errors.js";
import { restore, ObjectGap } from "./objects.js";
import type { Entry } from "./rounds.js";
import type { Context, ContentRef } from "./types.js";
import type { ValueView } from "./value.js";

/** Where a reader loads a conversation from. */
export interface ContextSource {
  /** Step 1: the value (null: never compacted); from the stream leader when leader is set. */
  value(conv: string, leader: boolean): Promise<ValueView | null>;
  /** Step 2: the entries at seqs; one no longer in the conversation is an entry with an error. */
  pinned(conv: string, seqs: number[]): Promise<Entry[]>;
  /** Step 4: every entry from `from` on, by sequence; from the stream leader when leader is set. */
  tail(conv: string, from: number, leader: boolean): Promise<Entry[]>;
  /** The object a stub names; an ObjectGap when it is missing, corrupt or refused. */
  object(conv: string, ref: ContentRef): Promise<Uint8Array>;
  /**
   * The conversation's forget tombstone (null: not forgotten lately); from the bucket's
   * leader when leader is set. A source without it has no forgotten conversations.
   */
  tombstone?(conv: string, leader: boolean): Promise<Tombstone | null>;
}

/** What a forget leaves for a while (schemas/tombstone.v1.json): the messages up to through_seq were deleted. */
export interface Tombstone {
  through_seq: number;
  forgotten_at: string;
}

/**
 * The value a reader may serve and where its tail starts. A value the tombstone covers
 * (first_seq <= through_seq, or no first_seq: it holds something of the forgotten
 * conversation, left by a writer that outlived the forget) is dropped, and the tail
 * starts above what the forget deleted. The value is read before the tombstone, so a
 * covered value written before the tombstone is read is dropped.
 */
export async function liveValue(src: ContextSource, conv: string, leader: boolean): Promise<{ v: ValueView | null; from: number }> {
  let v = await src.value(conv, leader);
  const tomb = src.tombstone ? await src.tombstone(conv, leader) : null;
  if (v && tomb && v.firstSeq <= tomb.through_seq) v = null;
  let from = v && v.tailStartSeq > 0 ? v.tailStartSeq : 1;
  if (tomb && from <= tomb.through_seq) from = tomb.through_seq + 1;
  return { v, from };
}

export interface ReadOptions extends AssembleOptions {
  /** Include this sequence: retry, then read from the stream leader, until the tail covers it. */
  atLeastSeq?: number;
}

/** Reads "pinned + summary + tail" for conv. */
export async function readContext(src: ContextSource, conv: string, opts: ReadOptions = {}): Promise<Context> {
  const atLeast = opts.atLeastSeq ?? 0;
  let leader = false;
  for (let attempt = 0; ; attempt++) {
    const { v, from } = await liveValue(src, conv, leader);
    const pinned = v ? await src.pinned(conv, v.pinnedSeqs) : [];
    const tail = await src.tail(conv, from, leader);
    const last = tail.length > 0 ? tail[tail.length - 1]!.seq : 0;
    if (atLeast === 0 || (v !== null && v.tailStartSeq > atLeast) || last >= atLeast) {
      // Stubs of messages over the max payload are shown whole; one whose object is
      // gone or refused is skipped and reported.
      await resolveEntries(src, conv, pinned);
      await resolveEntries(src, conv, tail);
      return assemble({ value: v, pinned, tail }, opts);
    }
    if (attempt >= 5) throw new NotCoveredError(`read does not cover the requested sequence: ${conv} has not reached sequence ${atLeast}`);
    leader = attempt >= 1; // one more read from any replica, then ask the leader
    await new Promise((r) => setTimeout(r, (attempt + 1) * 20));
  }
}

/**
 * Restores, in place, every valid stub among es. A stub whose object is missing,
 * corrupt or refused becomes an entry with an error (skipped and reported); any other
 * failure (no answer, no permission) fails the read.
 */
export async function resolveEntries(src: ContextSource, conv: string, es: Entry[]): Promise<void> {
  for (const e of es) {
    const ref = e.message?.content_ref;
    if (e.error !== undefined || !e.message || !ref) continue;
    try {
      e.message = restore(e.message, await src.object(conv, ref));
    } catch (err) {
      if (!(err instanceof ObjectGap)) throw err;
      e.message = undefined;
      e.error = `content_ref ${ref.name}: ${err.message}`;
    }
  }
}

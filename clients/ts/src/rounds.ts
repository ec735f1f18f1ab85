// Tool-round boundaries (the Go client's schemas/rounds): a model is never sent a tool
// call without all its results, nor a result without its call.

import { hasToolCalls } from "./message.js";
import type { Message, Skipped } from "./types.js";

/** One stored message: its CHAT sequence and the message, or why it is invalid. */
export interface Entry {
  seq: number;
  message?: Message;
  error?: string;
}

type Kind = "single" | "round" | "orphan" | "invalid";

interface Unit {
  start: number;
  end: number;
  kind: Kind;
  complete: boolean;
  pending: string[];
}

function units(es: Entry[]): Unit[] {
  const out: Unit[] = [];
  for (let i = 0; i < es.length; ) {
    const e = es[i]!;
    if (e.error !== undefined || !e.message) {
      out.push({ start: i, end: i + 1, kind: "invalid", complete: true, pending: [] });
      i++;
    } else if (e.message.role === "tool") {
      out.push({ start: i, end: i + 1, kind: "orphan", complete: true, pending: [] });
      i++;
    } else if (hasToolCalls(e.message)) {
      const u = scanRound(es, i);
      out.push(u);
      i = u.end;
    } else {
      out.push({ start: i, end: i + 1, kind: "single", complete: true, pending: [] });
      i++;
    }
  }
  return out;
}

function scanRound(es: Entry[], start: number): Unit {
  const calls = es[start]!.message!.tool_calls!;
  const pending = new Set(calls.map((c) => c.id));
  let j = start + 1;
  for (; j < es.length && pending.size > 0; j++) {
    const m = es[j]!.message;
    if (es[j]!.error !== undefined || !m) continue;
    if (m.role === "assistant") break; // the agent moved on: the round stays incomplete
    if (m.role === "tool" && pending.has(m.tool_call_id ?? "")) pending.delete(m.tool_call_id ?? "");
  }
  return {
    start,
    end: j,
    kind: "round",
    complete: pending.size === 0,
    pending: calls.filter((c) => pending.has(c.id)).map((c) => c.id),
  };
}

/** Formats a list of call ids as Go's %v does: [a b]. */
const list = (ids: string[]) => `[${ids.join(" ")}]`;

/**
 * The entries a model may be sent, in order: invalid entries, orphan tool results and
 * incomplete rounds are left out and reported; a message that landed between an
 * assistant's tool calls and their results moves to just after the round.
 */
export function normalize(es: Entry[]): { kept: Entry[]; skipped: Skipped[] } {
  const kept: Entry[] = [];
  const skipped: Skipped[] = [];
  const orphan = (e: Entry) =>
    skipped.push({ seq: e.seq, reason: `tool result ${JSON.stringify(e.message!.tool_call_id ?? "")} answers no open tool call` });
  for (const u of units(es)) {
    const first = es[u.start]!;
    switch (u.kind) {
      case "invalid":
        skipped.push({ seq: first.seq, reason: `invalid message: ${first.error}` });
        break;
      case "orphan":
        orphan(first);
        break;
      case "single":
        kept.push(first);
        break;
      case "round": {
        if (!u.complete) {
          skipped.push({ seq: first.seq, reason: `tool round incomplete: no result yet for ${list(u.pending)}` });
          for (let k = u.start + 1; k < u.end; k++) {
            const e = es[k]!;
            if (e.error === undefined && e.message && e.message.role !== "tool") {
              kept.push(e); // an interleaved message stays
              continue;
            }
            skipped.push({
              seq: e.seq,
              reason: e.error !== undefined ? `invalid message: ${e.error}` : "part of an incomplete tool round",
            });
          }
          break;
        }
        const calls = new Set(first.message!.tool_calls!.map((c) => c.id));
        kept.push(first);
        const after: Entry[] = [];
        for (let k = u.start + 1; k < u.end; k++) {
          const e = es[k]!;
          if (e.error !== undefined || !e.message) {
            skipped.push({ seq: e.seq, reason: `invalid message: ${e.error}` });
          } else if (e.message.role === "tool" && calls.has(e.message.tool_call_id ?? "")) {
            calls.delete(e.message.tool_call_id ?? "");
            kept.push(e);
          } else if (e.message.role === "tool") {
            orphan(e);
          } else after.push(e);
        }
        kept.push(...after);
        break;
      }
    }
  }
  return { kept, skipped };
}

/**
 * Checks invariant 1 on a context about to be sent to a model: every tool message
 * follows the call it answers, every call has its result, a round's results come right
 * after its calls. It returns why not, or null.
 */
export function checkPairs(msgs: Message[]): string | null {
  let open = new Set<string>();
  let openAt = 0;
  for (let i = 0; i < msgs.length; i++) {
    const m = msgs[i]!;
    if (open.size > 0) {
      if (m.role !== "tool" || !open.has(m.tool_call_id ?? "")) {
        return `message ${i} (${m.role}) comes before the results of ${list([...open].sort())} called at ${openAt}`;
      }
      open.delete(m.tool_call_id ?? "");
      continue;
    }
    if (m.role === "tool") return `message ${i}: tool result ${JSON.stringify(m.tool_call_id ?? "")} without its call`;
    if ((m.tool_calls?.length ?? 0) > 0 && m.role !== "assistant") return `message ${i}: ${m.role} message with tool calls`;
    if (hasToolCalls(m)) {
      open = new Set(m.tool_calls!.map((c) => c.id));
      openAt = i;
    }
  }
  return open.size > 0 ? `calls ${list([...open].sort())} at message ${openAt} have no result` : null;
}

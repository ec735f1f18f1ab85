// What the framework adapters' tests share: a conversation whose policy makes
// Compactor compact within a 100-turn loop, the scripted turn a fake model plays, and
// the checks on every request the model was sent.

import assert from "node:assert/strict";
import type { TestContext } from "node:test";
import { Compactor, checkPairs, estimateTokens, type Message } from "../src/index.js";
import { convId, need } from "./env.js";

/** The model's window the conversations of these tests are compacted for, in tokens. */
export const WINDOW = 4000;
/** Turns of each loop. */
export const TURNS = 100;
/** The fact of the first turn a later request must still hold. */
export const FACT = "NEEDLE-firstturn";

/** A client on the test's server and a conversation whose policy compacts well before WINDOW. */
export async function adapterConversation(t: TestContext, name: string): Promise<{ c: Compactor; conv: string }> {
  const c = await Compactor.connect({ servers: need("NATS_URL") });
  t.after(() => c.close());
  const conv = convId(name);
  await c.policy.set(conv, { context_window: WINDOW, threshold: 0.5, target: 0.3, keep_last_n: 8 });
  return { c, conv };
}

/** The user's message of turn i: the first carries the fact. */
export function userText(i: number): string {
  const fact = i === 0 ? ` Remember the code ${FACT}.` : "";
  return `Turn ${i}: look up item ${i} and tell me its price.${fact} ${"Some context for this turn. ".repeat(6)}`;
}

/** What the lookup tool answers for item i. */
export function lookup(item: number): string {
  return `item ${item} costs ${item * 3} euros; ${"stock details and shipping notes. ".repeat(5)}`;
}

/**
 * Checks every request a model was sent, each as chat messages: within WINDOW, tool
 * calls and results paired, and it returns the largest request's tokens.
 */
export function checkRequests(requests: Message[][]): number {
  assert.ok(requests.length >= 2 * TURNS, `${requests.length} model requests; want at least ${2 * TURNS}`);
  let most = 0;
  requests.forEach((msgs, i) => {
    const tokens = msgs.reduce((n, m) => n + estimateTokens(m), 0);
    most = Math.max(most, tokens);
    assert.ok(tokens <= WINDOW, `request ${i} holds ${tokens} tokens; the window is ${WINDOW}`);
    assert.equal(checkPairs(msgs), null, `request ${i}: ${checkPairs(msgs)}`);
  });
  return most;
}

/** Checks that the conversation was compacted and the last request still holds the fact. */
export async function checkCompactedAndFact(c: Compactor, conv: string, last: Message[]): Promise<void> {
  const cx = await c.context(conv);
  assert.ok(cx.generation >= 2, `generation ${cx.generation}: compaction should have run several times`);
  const text = JSON.stringify(last);
  assert.ok(text.includes(FACT), `the last request lost ${FACT}`);
  assert.ok(!text.includes("Turn 1:"), "the last request holds turn 1 verbatim: nothing was compacted");
}

/**
 * Checks that turns were stored once each: the user's message and the final answer of
 * a few turns match exactly one stored message.
 */
export async function checkStoredOnce(c: Compactor, conv: string, answer: (i: number) => string): Promise<void> {
  for (const i of [0, 1, 50, TURNS - 1]) {
    for (const q of [`Turn ${i}: look up`, answer(i)]) {
      const r = await c.recall(conv, { query: q, maxTokens: 8000 });
      assert.equal(r.matched, 1, `${JSON.stringify(q)} matches ${r.matched} stored messages; want 1`);
    }
  }
}

// Publish a JSONL conversation (one OpenAI chat message per line) and print the context
// a model would be sent, as JSONL: the TypeScript twin of `compactor publish` and
// `compactor context`.
//
//   node dist/examples/jsonl.js publish <conv> < conversation.jsonl   (prints each sequence)
//   node dist/examples/jsonl.js context <conv> [max-tokens]          (skipped messages on stderr)
//
// Connection settings: NATS_URL, NATS_USER, NATS_PASSWORD, NATS_TOKEN, NATS_CREDS,
// NATS_CA, NATS_INBOX_PREFIX.

import { createInterface } from "node:readline";
import { Compactor, connectOptionsFromEnv, InvalidError, type Message } from "../src/index.js";

const [cmd, conv, maxTokens] = process.argv.slice(2);
if (!(cmd === "publish" || cmd === "context") || !conv) {
  console.error("usage: node dist/examples/jsonl.js publish|context <conversation> [max-tokens]");
  process.exit(2);
}
const c = await Compactor.connect(connectOptionsFromEnv());
try {
  if (cmd === "publish") {
    const msgs: Message[] = [];
    let n = 0;
    for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
      n++;
      if (!line.trim()) continue;
      try {
        msgs.push(JSON.parse(line));
      } catch (e) {
        throw new InvalidError(`line ${n}`, (e as Error).message);
      }
    }
    // One random prefix per run, the line's index after it: a retry of a line whose
    // acknowledgement was lost reuses its id, so it is stored once.
    for (const r of await c.publishAll(conv, msgs)) console.log(r.seq);
  } else {
    const cx = await c.context(conv, { maxTokens: maxTokens ? Number(maxTokens) : undefined });
    for (const m of cx.messages) console.log(JSON.stringify(m));
    for (const s of cx.skipped) console.error(`skipped seq ${s.seq}: ${s.reason}`);
    console.error(`${conv}: generation ${cx.generation}, ${cx.messages.length} messages, ${cx.tokens} tokens`);
  }
} catch (e) {
  console.error(`${cmd} ${conv}: ${e instanceof Error ? `${e.name}: ${e.message}` : e}`);
  process.exitCode = 1;
} finally {
  await c.close();
}

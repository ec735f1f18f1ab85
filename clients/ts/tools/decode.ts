// Decodes stored payloads as the reader does, for the Go tests that compare this
// client's decoders with Go's (TestTSClientDecodesAsGo): one base64 payload per line on
// stdin, one JSON line out per payload. Messages: {"ok": true, "message": ...} or
// {"ok": false, "field": ..., "error": ...}. With the argument "value <conv>", KV values
// of conversation conv: {"ok": true, "value": {what the reader uses of it}}, or the
// field refused ("schema_version" for a newer one too). With "assemble", reader inputs
// as JSON ({value: <the value's text> | null, pinned, tail: [{seq, data: base64} | {seq,
// error}], raw, max_tokens}): the context assemble makes of them.

import { createInterface } from "node:readline";
import { assemble, decodeMessage, decodeValue, InvalidError, NewerSchemaError, toEntry, type Entry } from "../src/index.js";

interface Stored {
  seq: number;
  data?: string;
  error?: string;
}

const entry = (s: Stored): Entry =>
  s.error !== undefined ? { seq: s.seq, error: s.error } : toEntry({ seq: s.seq, subject: "", time: "", headers: new Map(), data: new Uint8Array(Buffer.from(s.data!, "base64")) });

const [mode, conv] = process.argv.slice(2);
for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
  const data = new Uint8Array(Buffer.from(line, "base64"));
  try {
    if (mode === "assemble") {
      const input = JSON.parse(Buffer.from(data).toString("utf8"));
      const value = input.value === null ? null : decodeValue(input.value, conv!);
      const cx = assemble(
        { value, pinned: (input.pinned ?? []).map(entry), tail: (input.tail ?? []).map(entry) },
        { raw: input.raw, maxTokens: input.max_tokens },
      );
      console.log(JSON.stringify({ ok: true, context: cx }));
    } else if (mode === "value") {
      const { value: _, ...view } = decodeValue(Buffer.from(data).toString("utf8"), conv!);
      console.log(JSON.stringify({ ok: true, value: view }));
    } else console.log(JSON.stringify({ ok: true, message: decodeMessage(data) }));
  } catch (e) {
    if (e instanceof NewerSchemaError) console.log(JSON.stringify({ ok: false, field: "schema_version", error: e.message }));
    else if (e instanceof InvalidError) console.log(JSON.stringify({ ok: false, field: e.field, error: e.message }));
    else throw e;
  }
}

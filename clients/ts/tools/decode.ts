// Decodes stored payloads as the reader does, for the Go tests that compare this
// client's decoders with Go's (TestTSClientDecodesAsGo): one base64 payload per line on
// stdin, one JSON line out per payload. Messages: {"ok": true, "message": ...} or
// {"ok": false, "field": ..., "error": ...}. With the argument "value <conv>", KV values
// of conversation conv: {"ok": true, "value": {what the reader uses of it}}, or the
// field refused ("schema_version" for a newer one too).

import { createInterface } from "node:readline";
import { decodeMessage, decodeValue, InvalidError, NewerSchemaError } from "../src/index.js";

const [mode, conv] = process.argv.slice(2);
for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
  const data = new Uint8Array(Buffer.from(line, "base64"));
  try {
    if (mode === "value") {
      const { value: _, ...view } = decodeValue(Buffer.from(data).toString("utf8"), conv!);
      console.log(JSON.stringify({ ok: true, value: view }));
    } else console.log(JSON.stringify({ ok: true, message: decodeMessage(data) }));
  } catch (e) {
    if (e instanceof NewerSchemaError) console.log(JSON.stringify({ ok: false, field: "schema_version", error: e.message }));
    else if (e instanceof InvalidError) console.log(JSON.stringify({ ok: false, field: e.field, error: e.message }));
    else throw e;
  }
}

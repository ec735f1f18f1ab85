// JSON as the Go reader reads it. JSON.parse alone would accept what Go refuses
// (invalid UTF-8 turned into U+FFFD, 1.0 as an integer) and lose what Go keeps, so
// payloads are checked as bytes first and integers by their source text.

/** Offset of the first byte of b that is not valid UTF-8, or -1 (Go's utf8.Valid rules). */
export function badUTF8(b: Uint8Array): number {
  const n = b.length;
  for (let i = 0; i < n; ) {
    const c = b[i]!;
    if (c < 0x80) {
      i++;
      continue;
    }
    let need: number;
    let lo = 0x80;
    let hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) need = 1;
    else if (c === 0xe0) [need, lo] = [2, 0xa0];
    else if (c >= 0xe1 && c <= 0xec) need = 2;
    else if (c === 0xed) [need, hi] = [2, 0x9f]; // no surrogates
    else if (c >= 0xee && c <= 0xef) need = 2;
    else if (c === 0xf0) [need, lo] = [3, 0x90];
    else if (c >= 0xf1 && c <= 0xf3) need = 3;
    else if (c === 0xf4) [need, hi] = [3, 0x8f];
    else return i;
    if (i + need >= n) return i;
    const b1 = b[i + 1];
    if (b1 === undefined || b1 < lo || b1 > hi) return i;
    for (let k = 2; k <= need; k++) {
      const bk = b[i + k];
      if (bk === undefined || bk < 0x80 || bk > 0xbf) return i;
    }
    i += need + 1;
  }
  return -1;
}

const utf8 = new TextDecoder("utf-8", { fatal: true });
const encoder = new TextEncoder();

/** Encodes text as UTF-8. */
export function utf8Bytes(s: string): Uint8Array {
  return encoder.encode(s);
}

/** Decodes bytes already checked with badUTF8. */
export function utf8Text(b: Uint8Array): string {
  return utf8.decode(b);
}

/** Number of Unicode code points of s (Go's utf8.RuneCountInString). */
export function runeCount(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) i++;
    }
    n++;
  }
  return n;
}

/** Whether v is a JSON object (not null, not an array). */
export function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** Sets an own enumerable property, "__proto__" included, without touching the prototype. */
export function setOwn(o: Record<string, unknown>, k: string, v: unknown): void {
  Object.defineProperty(o, k, { value: v, enumerable: true, writable: true, configurable: true });
}

// Raw scanning of text that JSON.parse accepted: the source text of each member, so
// integers can be checked as written.

function skipSpace(t: string, i: number): number {
  while (i < t.length) {
    const c = t.charCodeAt(i);
    if (c !== 0x20 && c !== 0x09 && c !== 0x0a && c !== 0x0d) break;
    i++;
  }
  return i;
}

/**
 * The index after the string literal that starts at i (t.length when it does not end).
 * It jumps from quote to quote (indexOf is native): a quote after an odd run of
 * backslashes is escaped, one after an even run ends the string.
 */
function skipString(t: string, i: number): number {
  for (;;) {
    const q = t.indexOf('"', i + 1);
    if (q < 0) return t.length;
    let b = q - 1;
    while (b > i && t.charCodeAt(b) === 0x5c) b--;
    if ((q - 1 - b) % 2 === 0) return q + 1;
    i = q;
  }
}

function skipValue(t: string, i: number): number {
  const c = t.charCodeAt(i);
  if (c === 0x22) return skipString(t, i);
  if (c === 0x7b || c === 0x5b) {
    let depth = 0;
    for (; i < t.length; i++) {
      const d = t.charCodeAt(i);
      if (d === 0x22) {
        i = skipString(t, i) - 1;
      } else if (d === 0x7b || d === 0x5b) depth++;
      else if (d === 0x7d || d === 0x5d) {
        depth--;
        if (depth === 0) return i + 1;
      }
    }
    return i;
  }
  while (i < t.length && !",}] \t\r\n".includes(t[i]!)) i++;
  return i;
}

/** The members of a JSON object's text, in order (duplicates kept: the last one wins when read). */
export function rawMembers(t: string): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  let i = skipSpace(t, 0);
  if (t[i] !== "{") return out;
  i = skipSpace(t, i + 1);
  while (i < t.length && t[i] !== "}") {
    const ks = i;
    i = skipString(t, i);
    const key = JSON.parse(t.slice(ks, i)) as string;
    i = skipSpace(t, i);
    i = skipSpace(t, i + 1); // ':'
    const vs = i;
    i = skipValue(t, i);
    out.push([key, t.slice(vs, i)]);
    i = skipSpace(t, i);
    if (t[i] === ",") i = skipSpace(t, i + 1);
  }
  return out;
}

/** The elements of a JSON array's text, in order. */
export function rawElements(t: string): string[] {
  const out: string[] = [];
  let i = skipSpace(t, 0);
  if (t[i] !== "[") return out;
  i = skipSpace(t, i + 1);
  while (i < t.length && t[i] !== "]") {
    const vs = i;
    i = skipValue(t, i);
    out.push(t.slice(vs, i));
    i = skipSpace(t, i);
    if (t[i] === ",") i = skipSpace(t, i + 1);
  }
  return out;
}

/** A map of raw members, the last of duplicates winning (Go's map[string]json.RawMessage). */
export function memberMap(t: string): Map<string, string> {
  return new Map(rawMembers(t));
}

export function isNullText(raw: string | undefined): boolean {
  return raw === undefined || raw.trim() === "null";
}

const MAX_INT64 = (1n << 63n) - 1n;
const MIN_INT64 = -(1n << 63n);
const MAX_UINT64 = (1n << 64n) - 1n;

/**
 * Reads an integer as Go's encoding/json reads one into an int (signed) or uint64: the
 * text must be a JSON integer (no fraction, no exponent) within the type's range. One
 * past 2^53 becomes the nearest JavaScript number, as JSON.parse makes it: the message
 * is read as Go reads it, its number approximate (refusing it would drop the message).
 */
export function intFromText(raw: string, unsigned: boolean): number {
  const t = raw.trim();
  if (!/^-?(0|[1-9][0-9]*)$/.test(t)) throw new Error(`${t.slice(0, 40)} is not an integer`);
  const v = BigInt(t);
  if (unsigned ? t.startsWith("-") || v > MAX_UINT64 : v < MIN_INT64 || v > MAX_INT64) {
    throw new Error(`${t.slice(0, 40)} is out of range`);
  }
  return Number(v);
}

/**
 * Go's encoding/json matches struct field names case-insensitively when no exact
 * match exists; folding maps the two non-ASCII runes that fold to ASCII letters (ſ, K).
 */
export function foldName(s: string): string {
  let out = "";
  for (const ch of s) {
    if (ch >= "a" && ch <= "z") out += ch.toUpperCase();
    else if (ch === "\u017f") out += "S";
    else if (ch === "\u212a") out += "K";
    else out += ch;
  }
  return out;
}

/**
 * Decodes the members of an object's text into struct fields the way encoding/json
 * does: in order, each member to the field whose name matches exactly or, failing
 * that, case-insensitively; later members overwrite earlier ones; others are ignored.
 */
export function forEachField(t: string, fields: readonly string[], fn: (field: string, raw: string) => void): void {
  const folded = fields.map(foldName);
  for (const [k, raw] of rawMembers(t)) {
    let f = fields.indexOf(k);
    if (f < 0) f = folded.indexOf(foldName(k));
    if (f >= 0) fn(fields[f]!, raw);
  }
}

/** The first non-space character of a JSON text: its kind. */
export function kindOf(raw: string): string {
  return raw.trimStart()[0] ?? "";
}

/** Reads a JSON string as Go reads one into a string: null leaves it as it was. */
export function stringFromText(raw: string, prev: string): string {
  const k = kindOf(raw);
  if (raw.trim() === "null") return prev;
  if (k !== '"') throw new Error(`${describe(raw)} is not a string`);
  return (JSON.parse(raw) as string).toWellFormed();
}

/** Names a JSON value's kind for an error. */
export function describe(raw: string): string {
  switch (kindOf(raw)) {
    case '"':
      return "a string";
    case "{":
      return "an object";
    case "[":
      return "an array";
    case "t":
    case "f":
      return "a boolean";
    case "n":
      return "null";
  }
  return `the number ${raw.trim().slice(0, 40)}`;
}

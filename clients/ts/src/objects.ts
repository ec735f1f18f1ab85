// Messages over the server's max payload (README, "Large messages"): what makes them
// large is stored as one object, named <conv>/<sha256>, and a stub with a content_ref
// is published in their place. These are the pure steps, the same as the Go client's
// (schemas.Message.Offload and Restore, jetstream's checks); the NATS side is in store.ts.

import { createHash } from "node:crypto";
import { InvalidError } from "./errors.js";
import { badUTF8, isObject, setOwn, utf8Bytes, utf8Text } from "./json.js";
import { decodeMessageText, MESSAGE_FIELDS } from "./message.js";
import { storedTokens } from "./tokens.js";
import type { ContentRef, Message } from "./types.js";

/** The default objects bucket. */
export const OBJECTS_BUCKET = "compaction-objects";
/** The largest object a client stores or a reader fetches (jetstream.DefaultMaxObjectSize). */
export const MAX_OBJECT_SIZE = 16 << 20;

/**
 * A stub whose object is missing or corrupt (kind "missing") or whose reference no
 * reader follows (kind "refused"): its message is skipped and reported, never a crash.
 */
export class ObjectGap extends Error {
  constructor(
    readonly kind: "missing" | "refused",
    message: string,
    /** The bucket holds no description of the name at all. */
    readonly noDescription = false,
  ) {
    super(`${kind === "missing" ? "stored object is missing" : "content reference refused"}: ${message}`);
  }
}

/** The object store's description of an object (the nats.go and nats.js format). */
export interface ObjectInfo {
  name?: string;
  bucket?: string;
  nuid?: string;
  size?: number;
  chunks?: number;
  digest?: string;
  deleted?: boolean;
  options?: { link?: unknown; max_chunk_size?: number } | null;
}

export function sha256Hex(b: Uint8Array): string {
  return createHash("sha256").update(b).digest("hex");
}

/** The subject of an object's description: $O.<bucket>.M.<base64url(name), padded>. */
export function objectMetaSubject(bucket: string, name: string): string {
  const b64 = Buffer.from(name).toString("base64url");
  return `$O.${bucket}.M.${b64}${"=".repeat((4 - (b64.length % 4)) % 4)}`;
}

/**
 * Refuses, before anything is fetched, a reference to another conversation's object or
 * another bucket, or to an object over maxSize: a stub is as hostile as any message.
 */
export function checkOwner(ref: ContentRef, conv: string, bucket: string, maxSize: number): void {
  if (ref.bucket !== bucket) {
    throw new ObjectGap(
      "refused",
      `content_ref.bucket: names bucket ${JSON.stringify(ref.bucket)}; objects of this conversation are in ${JSON.stringify(bucket)}`,
    );
  }
  if (!ref.name.startsWith(`${conv}/`)) {
    throw new ObjectGap(
      "refused",
      `content_ref.name: names object ${JSON.stringify(ref.name)} outside conversation ${JSON.stringify(conv)} (its objects are named ${conv}/<sha256>)`,
    );
  }
  if (ref.size > maxSize) {
    throw new ObjectGap("refused", `${ref.name} of ${ref.size} bytes is over the max object size of ${maxSize} bytes`);
  }
}

/**
 * Compares an object's description with the reference before anything of it is read:
 * a link is refused, a description of another name, size or digest is corrupt.
 */
export function checkInfo(info: ObjectInfo, ref: ContentRef, bucket: string): void {
  const corrupt = (what: string) => new ObjectGap("missing", `${ref.name} is corrupt: ${what}`);
  if (info.options?.link) throw new ObjectGap("refused", `${ref.name} is a link; links are not followed`);
  if (info.name !== ref.name || info.bucket !== bucket) {
    throw corrupt(`its description names ${info.name} of bucket ${info.bucket}`);
  }
  if (info.size !== ref.size) throw corrupt(`it holds ${info.size} bytes, the reference says ${ref.size}`);
  const digest = info.digest ?? "";
  const b64 = digest.slice("SHA-256=".length);
  if (
    !digest.startsWith("SHA-256=") ||
    !/^[A-Za-z0-9_-]*={0,2}$/.test(b64) ||
    b64.length % 4 !== 0 ||
    Buffer.from(b64, "base64url").toString("hex") !== ref.sha256
  ) {
    throw corrupt("its digest is not the reference's sha256");
  }
  const chunks = info.chunks ?? 0;
  if (!/^[A-Za-z0-9]{1,64}$/.test(info.nuid ?? "") || !Number.isInteger(chunks) || chunks < 1 || chunks > ref.size) {
    throw corrupt("its chunks are not described");
  }
}

/** Checks fetched bytes against the reference's sha256. */
export function checkBytes(bytes: Uint8Array, ref: ContentRef): void {
  if (sha256Hex(bytes) !== ref.sha256) {
    throw new ObjectGap("missing", `${ref.name} is corrupt: its bytes do not hash to the reference's sha256`);
  }
}

const STUB_ONLY = new Set<string>(MESSAGE_FIELDS.filter((k) => k !== "content" && k !== "reasoning" && k !== "extra"));

/**
 * The message a stub and its object make: the stub's fields with the content,
 * reasoning, extra and unknown fields the object holds. An object cannot change what the
 * stub says about roles and tool rounds: one holding those fields is refused.
 */
export function restore(stub: Message, object: Uint8Array): Message {
  const name = stub.content_ref?.name ?? "?";
  if (badUTF8(object) >= 0) throw new ObjectGap("refused", `object ${name} restores an invalid message: it is not valid UTF-8`);
  let all: unknown;
  try {
    all = JSON.parse(utf8Text(object));
  } catch {
    all = undefined;
  }
  if (!isObject(all)) throw new ObjectGap("refused", `content_ref: object ${name} is not a JSON object`);
  if (!Object.hasOwn(all, "content")) throw new ObjectGap("refused", `content_ref: object ${name} holds no content`);
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(stub)) {
    if (k !== "content_ref" && k !== "reasoning" && k !== "extra") setOwn(out, k, v);
  }
  for (const [k, v] of Object.entries(all)) {
    if (STUB_ONLY.has(k)) {
      throw new ObjectGap("refused", `content_ref: object ${name} holds ${JSON.stringify(k)}, which only the stub may carry`);
    }
    setOwn(out, k, v);
  }
  try {
    return decodeMessageText(JSON.stringify(out));
  } catch (e) {
    throw new ObjectGap("refused", `object ${name} restores an invalid message: ${(e as Error).message}`);
  }
}

/**
 * Splits m into the stub to publish and the object to store for conversation conv: the
 * object holds m's content, reasoning, extra and unknown fields; the stub the rest, a
 * note for content and the reference. The same message always gives the same object,
 * so its name, content addressed, is stable across retries.
 */
export function offload(m: Message, conv: string, bucket: string): { stub: Message; object: Uint8Array; ref: ContentRef } {
  if (m.content_ref !== undefined) {
    throw new InvalidError("content_ref", "is set by the client for a message over the max payload; publish the whole message");
  }
  const obj: Record<string, unknown> = { content: m.content ?? null };
  if (m.reasoning) obj["reasoning"] = m.reasoning;
  if (m.extra !== undefined) obj["extra"] = m.extra;
  const stub: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(m)) {
    if (STUB_ONLY.has(k)) setOwn(stub, k, v);
  }
  for (const k of Object.keys(m).sort()) {
    if (!STUB_ONLY.has(k) && !["content", "reasoning", "extra"].includes(k)) setOwn(obj, k, m[k]);
  }
  const object = utf8Bytes(JSON.stringify(obj));
  const sha256 = sha256Hex(object);
  const name = `${conv}/${sha256}`;
  const ref: ContentRef = { bucket, name, size: object.length, sha256, tokens: storedTokens(m) };
  stub["content"] = `[content of ${object.length} bytes stored as object ${name} of bucket ${bucket}]`;
  stub["content_ref"] = ref;
  return { stub: decodeMessageText(JSON.stringify(stub)), object, ref };
}

// Typed errors: callers tell what went wrong with instanceof, never by parsing a
// message. Every error of this package is a CompactorError.

/** The base class of every error this package throws. */
export class CompactorError extends Error {
  override name = "CompactorError";
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/**
 * Bad input: a conversation id, message or request that breaks the wire contract, or a
 * 400 of the compactor service. `field` names what is wrong and `rule` the rule broken,
 * as the Go client's schemas.ValidationError does. Nothing was stored.
 */
export class InvalidError extends CompactorError {
  override name = "InvalidError";
  constructor(
    readonly field: string,
    readonly rule: string,
    options?: { cause?: unknown },
  ) {
    super(`${field}: ${rule}`, options);
  }
}

/** A tool message whose call is not open in the conversation (pipeline.ErrToolResultWithoutCall). */
export class ToolResultWithoutCallError extends InvalidError {
  override name = "ToolResultWithoutCallError";
  constructor(
    rule: string,
    /** The call was answered before (a retry with the same msgId may go ahead). */
    readonly answered: boolean,
  ) {
    super("tool_call_id", rule);
  }
}

/**
 * A message no publish can carry: over the server's max payload even with its content
 * stored as an object, or with an object over the max object size (pipeline.ErrTooLarge).
 */
export class TooLargeError extends CompactorError {
  override name = "TooLargeError";
}

/** A stream, bucket or key the call needs does not exist (or the server said 404). */
export class NotFoundError extends CompactorError {
  override name = "NotFoundError";
}

/** No compactor service answered: no `compactor serve` runs on this NATS (pipeline.ErrNoService). */
export class NoServiceError extends CompactorError {
  override name = "NoServiceError";
}

/**
 * The request was not taken; nothing was done. Either compactor.compact answered busy:
 * a request was already pending for the conversation, so this one, with its
 * instructions, was NOT queued; ask again when the pending one (pendingRequestId) has
 * its outcome (waitForOutcome). Or the service answered 503: it is stopping, or has no
 * free slot to wait with (wait_ms); there is no pending request to name then
 * (pendingRequestId is undefined): retry later. Both are what Go's pipeline.ErrBusy
 * matches, and what the CLI's exit code 4 means.
 */
export class BusyError extends CompactorError {
  override name = "BusyError";
  constructor(
    message: string,
    readonly pendingRequestId?: string,
  ) {
    super(message);
  }
}

/**
 * No answer in time. For a publish the message may still have been stored: retry with
 * the same msgId and the stream stores it once.
 */
export class TimeoutError extends CompactorError {
  override name = "TimeoutError";
}

/** The server refused a subject to this user (deploy/nats/accounts.conf). */
export class PermissionError extends CompactorError {
  override name = "PermissionError";
}

/** A service answer of 409: a policy that cannot be resolved, or a conversation forgotten meanwhile. */
export class ConflictError extends CompactorError {
  override name = "ConflictError";
  readonly code = 409;
}

/** Any other error answer of the compactor service (a 500, ...; a 503 is a BusyError). */
export class ServiceError extends CompactorError {
  override name = "ServiceError";
  constructor(
    readonly subject: string,
    readonly code: number,
    readonly description: string,
  ) {
    super(`${subject}: ${description} (code ${code})`);
  }
}

/** A read with atLeastSeq could not see the sequence it asked for (pipeline.ErrNotCovered). */
export class NotCoveredError extends CompactorError {
  override name = "NotCoveredError";
}

/** The KV value was written by a newer schema version: upgrade the reader. */
export class NewerSchemaError extends CompactorError {
  override name = "NewerSchemaError";
  constructor(readonly version: number) {
    super(`compaction value has schema_version ${version}; this reader understands 1: upgrade the reader`);
  }
}

/**
 * publishBatch's error: the first message of the batch (in its order) that was not
 * stored, or whose outcome is not known. `cause` is that message's own error;
 * `results` holds the result of every message stored, undefined for the others.
 */
export class PublishBatchError extends CompactorError {
  override name = "PublishBatchError";
  constructor(
    readonly index: number,
    readonly conv: string,
    cause: unknown,
    readonly results: ReadonlyArray<{ seq: number; msgId: string; duplicate: boolean } | undefined>,
  ) {
    super(`batch message ${index} (conversation ${conv}): ${(cause as Error)?.message ?? String(cause)}`, { cause });
  }
}

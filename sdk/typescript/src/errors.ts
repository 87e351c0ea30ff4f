import { status, type ServiceError } from "@grpc/grpc-js";

/**
 * A call to the broker failed. `code` is its gRPC status code (`status.INVALID_ARGUMENT` for a
 * bad topic, `RESOURCE_EXHAUSTED` for a full group, `UNAVAILABLE` when no broker answers, ...).
 */
export class BrokerError extends Error {
  readonly code: status;

  constructor(message: string, code: status) {
    super(message);
    this.name = "BrokerError";
    this.code = code;
  }
}

/** The client or the subscription was closed. */
export class ClosedError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ClosedError";
  }
}

/** The message was acked or nacked already. */
export class AlreadySettledError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "AlreadySettledError";
  }
}

/**
 * Codes that trying again cannot fix: a publish fails with them at once and a subscription
 * ends with them, as the Go and Python clients do. ALREADY_EXISTS is not among them: when a
 * subscription re-opens, the broker may not have noticed yet that its previous stream is gone.
 */
export const fatalCodes: ReadonlySet<status> = new Set([
  status.INVALID_ARGUMENT,
  status.FAILED_PRECONDITION,
  status.RESOURCE_EXHAUSTED,
  status.NOT_FOUND,
  status.PERMISSION_DENIED,
  status.UNAUTHENTICATED,
  status.UNIMPLEMENTED,
  status.OUT_OF_RANGE,
]);

/** The name of a status code, "UNAVAILABLE" for 14. */
export function codeName(code: status): string {
  return status[code] ?? `code ${code}`;
}

/** A status code from the wire (PublishResult.code, Refused.code): an unknown one is UNKNOWN. */
export function toStatus(code: number): status {
  return code in status ? (code as status) : status.UNKNOWN;
}

/**
 * e as a BrokerError that says what was being done, with a hint at the usual causes of
 * UNAVAILABLE: no broker at the address, or TLS settings that do not match the broker's.
 */
export function brokerError(what: string, e: Partial<ServiceError>, addrs: readonly string[]): BrokerError {
  const code = e.code ?? status.UNKNOWN;
  const details = e.details ?? e.message ?? "";
  let msg = `tinybroker: ${what}: ${codeName(code)}: ${details}`;
  if (code === status.UNAVAILABLE && /handshake|SSL|TLS|certificate/i.test(details)) {
    msg +=
      " (the TLS handshake failed: check the tls option against the broker's tls block: plaintext against a TLS " +
      "broker, a CA that is not the one that signed its certificate, or serverName)";
  } else if (code === status.UNAVAILABLE && !details.includes("shutting down")) {
    // grpc-js reports a plaintext client against a TLS broker as a failed connection too.
    msg += ` (is a broker running at ${addrs.join(",")}? \`tinybroker serve\` starts one; a broker with a tls block needs the tls option, one without refuses it)`;
  }
  return new BrokerError(msg, code);
}

// The tinybroker client for Node.js: see README.md.
export {
  Client,
  newMessageId,
  type ClientOptions,
  type PublishOptions,
  type PublishResult,
  type TLSOptions,
} from "./client.js";
export { Subscription, type Handler, type SubscribeOptions } from "./subscription.js";
export { Message } from "./message.js";
export type { MessagesOptions } from "./iterate.js";
export { BrokerError, ClosedError, AlreadySettledError } from "./errors.js";
export { status } from "@grpc/grpc-js";

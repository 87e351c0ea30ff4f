package server

// The error budget of a PublishStream answer stays here, not in internal/wire with the
// answer's encoder: the encoder writes whatever results it is given, and what error text a
// result carries is the server's choice, made where the server turns the broker's errors into
// results (servePublish), from its own limits (max_publish_batch).

// answerBudget bounds the error text of one PublishStreamResponse: 64 KiB plus twice the
// frame's size. A frame of small invalid messages would otherwise be answered with a long
// error per message (a 2-byte empty message earns a 70-byte error); past the budget a failed
// message gets its code and omittedError. With at most max_publish_batch results of bounded
// size, an answer is then at most a constant plus a small multiple of its frame.
func answerBudget(frameSize int) int { return 64<<10 + 2*frameSize }

// omittedError is the error text of a failed message once its answer's budget is spent.
const omittedError = "error text omitted: see this frame's first errors"

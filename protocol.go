package webhooks

import "github.com/streamhooks/webhooks/receiver"

// successResponse is the wire form of a successful callback: streams is
// always included, even when empty.
type successResponse struct {
	OK      bool           `json:"ok"`
	Token   string         `json:"token"`
	Streams []StreamOffset `json:"streams"`
}

// ErrorCode is the machine-readable code of an API error. It is package
// receiver's, with which consumers read the callback API's codes.
type ErrorCode = receiver.ErrorCode

// Error codes of the callback API, as spec 001 defines them: package
// receiver's, named here for the engine that answers with them. The
// subscription API answers INVALID_REQUEST too, and its own codes, which
// the README lists.
const (
	CodeInvalidRequest = receiver.CodeInvalidRequest // 400
	CodeTokenExpired   = receiver.CodeTokenExpired   // 401, carries a new token
	CodeTokenInvalid   = receiver.CodeTokenInvalid   // 401
	CodeAlreadyClaimed = receiver.CodeAlreadyClaimed // 409
	CodeInvalidOffset  = receiver.CodeInvalidOffset  // 409
	CodeStaleEpoch     = receiver.CodeStaleEpoch     // 409
	CodeConsumerGone   = receiver.CodeConsumerGone   // 410
)

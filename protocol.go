package webhooks

import "github.com/streamhooks/webhooks/receiver"

// successResponse is the wire form of a successful callback: streams is
// always included, even when empty.
type successResponse struct {
	OK      bool           `json:"ok"`
	Token   string         `json:"token"`
	Streams []StreamOffset `json:"streams"`
}

// ErrorCode is the machine-readable code of an API error. The codes of
// the callback API are package receiver's, which consumers read them with.
type ErrorCode = receiver.ErrorCode

// Error codes of the callback API, as the spec defines them: package
// receiver's, named here too for the engine that answers with them.
const (
	CodeInvalidRequest = receiver.CodeInvalidRequest // 400
	CodeTokenExpired   = receiver.CodeTokenExpired   // 401, carries a new token
	CodeTokenInvalid   = receiver.CodeTokenInvalid   // 401
	CodeAlreadyClaimed = receiver.CodeAlreadyClaimed // 409
	CodeInvalidOffset  = receiver.CodeInvalidOffset  // 409
	CodeStaleEpoch     = receiver.CodeStaleEpoch     // 409
	CodeConsumerGone   = receiver.CodeConsumerGone   // 410
)

// Error codes of the subscription API, where the spec gives only statuses.
const (
	CodeSubscriptionNotFound ErrorCode = "SUBSCRIPTION_NOT_FOUND" // 404
	CodeSubscriptionConflict ErrorCode = "SUBSCRIPTION_CONFLICT"  // 409
	CodeConsumerNotFound     ErrorCode = "CONSUMER_NOT_FOUND"     // 404
	CodeUnauthorized         ErrorCode = "UNAUTHORIZED"           // 401, see WithAuthorizer
	CodeForbidden            ErrorCode = "FORBIDDEN"              // 403, see WithAuthorizer
	CodeInternal             ErrorCode = "INTERNAL_ERROR"         // 500
	// CodeServiceUnavailable answers requests to either API that arrive
	// before Engine.Start has loaded the engine's state, or while the
	// Store cannot be reached (ErrStoreUnavailable). It comes with a
	// Retry-After header.
	CodeServiceUnavailable ErrorCode = "SERVICE_UNAVAILABLE" // 503
)

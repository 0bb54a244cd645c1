package receiver

// CallbackRequest is the JSON body a consumer POSTs to its callback URL.
// Epoch is required; every other field is optional.
type CallbackRequest struct {
	Epoch       *int64         `json:"epoch"`
	WakeID      string         `json:"wake_id,omitempty"`
	Acks        []StreamOffset `json:"acks,omitempty"`
	Subscribe   []string       `json:"subscribe,omitempty"`
	Unsubscribe []string       `json:"unsubscribe,omitempty"`
	Done        bool           `json:"done,omitempty"`
}

// CallbackResponse is the JSON body of every callback response. On success
// OK is true and Streams lists the subscribed streams, always present; on
// failure Error says why. Token is the bearer token for the next callback.
type CallbackResponse struct {
	OK      bool           `json:"ok"`
	Token   string         `json:"token,omitempty"`
	Streams []StreamOffset `json:"streams,omitempty"`
	Error   *ErrorBody     `json:"error,omitempty"`
}

// ErrorBody is the "error" member of every JSON error response.
type ErrorBody struct {
	Code    ErrorCode `json:"code"`
	Message string    `json:"message"`
}

// ErrorCode is the machine-readable code of an API error.
type ErrorCode string

// Error codes of the callback API, as spec 001 defines them.
const (
	CodeInvalidRequest ErrorCode = "INVALID_REQUEST" // 400
	CodeTokenExpired   ErrorCode = "TOKEN_EXPIRED"   // 401, carries a new token
	CodeTokenInvalid   ErrorCode = "TOKEN_INVALID"   // 401
	CodeAlreadyClaimed ErrorCode = "ALREADY_CLAIMED" // 409
	CodeInvalidOffset  ErrorCode = "INVALID_OFFSET"  // 409
	CodeStaleEpoch     ErrorCode = "STALE_EPOCH"     // 409
	CodeConsumerGone   ErrorCode = "CONSUMER_GONE"   // 410
)

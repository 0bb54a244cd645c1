package webhooks

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/streamhooks/webhooks/receiver"
)

// The errors of the Go API. Every exported Engine method returns errors that
// a caller matches with errors.Is or errors.As:
//
//   - ErrNotStarted before Start has loaded the engine's state, and
//     ErrStopped from Ready and Live after Stop;
//   - ErrSubscriptionNotFound, ErrSubscriptionExists, ErrConsumerNotFound
//     and ErrConsumerExists for what a call names, or would create;
//   - a *ValidationError for an input the engine refuses, naming the field;
//   - ErrForbidden and ErrTenantLimit for what a tenant may not create
//     (WithTenancy);
//   - an error wrapping ErrStoreUnavailable while the Store cannot be
//     reached.
//
// The handlers answer each with the status and code of its spec, chosen in
// one place (httpError), and never with the text of any other error.
var (
	// ErrNotStarted is returned by every Engine method but Start, Stop,
	// StreamDeleted and Authorize until Start has loaded the
	// subscriptions; the handlers answer 503 SERVICE_UNAVAILABLE meanwhile. Nothing is lost from
	// StreamCreated and StreamAppended: Start's sweep gives every matching
	// stream its consumers and wakes those with pending work.
	ErrNotStarted = errors.New("webhooks: engine not started")
	// ErrStopped is returned by Start after Stop.
	ErrStopped = errors.New("webhooks: engine stopped")
)

// ValidationError refuses an input: a field of a subscription or of a
// request, an argument, or a request body. The subscription and callback
// APIs answer it 400 INVALID_REQUEST with Reason as the message, or 409
// INVALID_OFFSET for an offset that a stream's tail refutes.
type ValidationError struct {
	// Field names the input as the APIs name it in JSON or in the query:
	// "webhook", "offset", "retry.max_age_ms", "subscription" (the ID),
	// "body" for a request body as a whole.
	Field string
	// Reason says what is wrong, naming the field.
	Reason string
	// offset is set for an offset the stream's tail refutes.
	offset bool
}

func (e *ValidationError) Error() string { return "webhooks: " + e.Reason }

// invalid returns a ValidationError of field.
func invalid(field, format string, args ...any) *ValidationError {
	return &ValidationError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// invalidOffset returns a ValidationError of field for an offset that the
// stream's tail refutes: 409 INVALID_OFFSET.
func invalidOffset(field, format string, args ...any) *ValidationError {
	ve := invalid(field, format, args...)
	ve.offset = true
	return ve
}

// asInvalid returns err as a ValidationError: as it is if it is one,
// otherwise of field, with err's text as the reason.
func asInvalid(field string, err error) error {
	var ve *ValidationError
	if err == nil || errors.As(err, &ve) {
		return err
	}
	return &ValidationError{Field: field, Reason: err.Error()}
}

// detailed is a sentinel error with a message naming what it is about.
type detailed struct {
	is      error
	message string
}

func (e *detailed) Error() string { return "webhooks: " + e.message }
func (e *detailed) Unwrap() error { return e.is }

// detail returns sentinel is with a message naming what it is about.
func detail(is error, format string, args ...any) error {
	return &detailed{is: is, message: fmt.Sprintf(format, args...)}
}

// errNotDeadLetter refuses to revive a consumer that is not a dead letter.
// Only the subscription API refuses this: ResumeConsumer does nothing.
var errNotDeadLetter = errors.New("webhooks: consumer is not a dead letter")

// protocolError is an error of the callback protocol, which only a
// callback request can meet: its code is spec 001's.
type protocolError struct {
	code    receiver.ErrorCode
	message string
	token   string // the new token of TOKEN_EXPIRED
}

func (e *protocolError) Error() string { return string(e.code) + ": " + e.message }

// refuse returns a protocolError.
func refuse(code receiver.ErrorCode, format string, args ...any) *protocolError {
	return &protocolError{code: code, message: fmt.Sprintf(format, args...)}
}

// methodError answers a request whose method no route serves at its
// path and query: 405 with an Allow header.
type methodError struct{ allow string }

func (e *methodError) Error() string { return "method not allowed; use " + e.allow }

// The codes of the subscription API, where the spec gives only statuses.
// Go callers match errors, not these; the README lists them.
const (
	codeSubscriptionNotFound receiver.ErrorCode = "SUBSCRIPTION_NOT_FOUND" // 404
	codeSubscriptionConflict receiver.ErrorCode = "SUBSCRIPTION_CONFLICT"  // 409
	codeConsumerNotFound     receiver.ErrorCode = "CONSUMER_NOT_FOUND"     // 404
	codeUnauthorized         receiver.ErrorCode = "UNAUTHORIZED"           // 401, see WithAuthorizer
	codeForbidden            receiver.ErrorCode = "FORBIDDEN"              // 403, see WithAuthorizer and Tenancy.Patterns
	codeTenantLimit          receiver.ErrorCode = "TENANT_LIMIT_REACHED"   // 403, see Tenancy.MaxSubscriptions
	codeInternal             receiver.ErrorCode = "INTERNAL_ERROR"         // 500
	// codeServiceUnavailable answers requests to either API that arrive
	// before Start has loaded the engine's state, or while the Store
	// cannot be reached, with a Retry-After header.
	codeServiceUnavailable receiver.ErrorCode = "SERVICE_UNAVAILABLE" // 503
)

// statusOf is the HTTP status of each code, as its spec writes it.
var statusOf = map[receiver.ErrorCode]int{
	receiver.CodeInvalidRequest: http.StatusBadRequest,
	receiver.CodeTokenExpired:   http.StatusUnauthorized,
	receiver.CodeTokenInvalid:   http.StatusUnauthorized,
	receiver.CodeAlreadyClaimed: http.StatusConflict,
	receiver.CodeInvalidOffset:  http.StatusConflict,
	receiver.CodeStaleEpoch:     http.StatusConflict,
	receiver.CodeConsumerGone:   http.StatusGone,
	codeSubscriptionNotFound:    http.StatusNotFound,
	codeSubscriptionConflict:    http.StatusConflict,
	codeConsumerNotFound:        http.StatusNotFound,
	codeUnauthorized:            http.StatusUnauthorized,
	codeForbidden:               http.StatusForbidden,
	codeTenantLimit:             http.StatusForbidden,
	codeInternal:                http.StatusInternalServerError,
	codeServiceUnavailable:      http.StatusServiceUnavailable,
}

// wireError is an error as a client sees it.
type wireError struct {
	status  int
	code    receiver.ErrorCode
	message string
	token   string // only for TOKEN_EXPIRED
	// header is set on the response: Allow of a 405, WWW-Authenticate of
	// a 401 from an Authorizer, Retry-After of a 503.
	header http.Header
}

// retryAfterSeconds is the Retry-After of a 503: as long as the scheduler
// waits before it tries the Store again.
var retryAfterSeconds = strconv.Itoa(int(storeErrorRetry / time.Second))

// httpError maps err to what the client sees: the one place where errors
// become statuses and codes. An error it does not know is a generic 500,
// and its text never reaches the client.
func httpError(err error) *wireError {
	var (
		pe *protocolError
		ve *ValidationError
		me *methodError
		de *detailed
	)
	message := func(fallback string) string {
		if errors.As(err, &de) {
			return de.message
		}
		return fallback
	}
	w := &wireError{code: codeInternal, message: "internal error"}
	switch {
	case errors.As(err, &pe):
		w.code, w.message, w.token = pe.code, pe.message, pe.token
	case errors.As(err, &me):
		w.code, w.message = receiver.CodeInvalidRequest, me.Error()
		w.header = http.Header{"Allow": {me.allow}}
		w.status = http.StatusMethodNotAllowed
	case errors.As(err, &ve):
		w.code, w.message = receiver.CodeInvalidRequest, ve.Reason
		if ve.offset {
			w.code = receiver.CodeInvalidOffset
		}
	case errors.Is(err, ErrUnauthorized):
		w.code, w.message = codeUnauthorized, "authentication required"
		w.header = http.Header{"Www-Authenticate": {"Bearer"}}
	case errors.Is(err, ErrForbidden):
		// An Authorizer's error is never detailed: only the engine's
		// own refusals, such as a tenant's pattern, say why.
		w.code, w.message = codeForbidden, message("not allowed")
	case errors.Is(err, ErrTenantLimit):
		w.code, w.message = codeTenantLimit, message("the tenant has reached its limit of subscriptions")
	case errors.Is(err, errNotDeadLetter):
		w.code, w.message = receiver.CodeInvalidRequest, message("consumer is not a dead letter")
		w.status = http.StatusConflict
	case errors.Is(err, ErrPendingVerification):
		w.code, w.message = receiver.CodeInvalidRequest, message("the subscription is pending verification")
		w.status = http.StatusConflict
	case errors.Is(err, ErrNotPending):
		w.code, w.message = receiver.CodeInvalidRequest, message("the subscription is not pending verification")
		w.status = http.StatusConflict
	case errors.Is(err, ErrSubscriptionNotFound):
		w.code, w.message = codeSubscriptionNotFound, message("no such subscription")
	case errors.Is(err, ErrSubscriptionExists):
		w.code, w.message = codeSubscriptionConflict, message("the subscription exists with a different configuration")
	case errors.Is(err, ErrConsumerNotFound):
		w.code, w.message = codeConsumerNotFound, message("no such consumer")
	case errors.Is(err, ErrNotStarted):
		w.code, w.message = codeServiceUnavailable, "the webhook engine has not started; retry later"
	case errors.Is(err, ErrStoreUnavailable):
		w.code, w.message = codeServiceUnavailable, "the webhook engine cannot reach its store; retry later"
	}
	if w.status == 0 {
		w.status = statusOf[w.code]
	}
	if w.status == http.StatusServiceUnavailable {
		w.header = http.Header{"Retry-After": {retryAfterSeconds}}
	}
	return w
}

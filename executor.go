package webhooks

import (
	"log/slog"
	"net/http"
	"sync"

	"github.com/benbjohnson/clock"
	"go.opentelemetry.io/otel/propagation"

	"github.com/streamhooks/webhooks/internal/netguard"
)

// executor holds what the mechanisms and transports use to make a
// delivery attempt, and nothing more: a mechanism prepares its message
// from it, and a transport sends through it. It knows neither the Store
// nor the scheduler; an attempt's outcome goes back up the pipeline
// (attempt.go), which records it.
type executor struct {
	clock   clock.Clock
	cursors *cursorMachine
	source  StreamSource
	// tokens signs a wake's callback token; Start sets it, before the
	// first attempt.
	tokens *tokens
	// keys sign the deliveries of SignatureEd25519 subscriptions.
	keys *webhookKeyring
	// callbackPrefix is every callback URL but the consumer ID.
	callbackPrefix string

	client *http.Client
	policy netguard.Policy
	// propagator injects the sending span's trace context into each
	// POST; nil injects none (WithPropagator).
	propagator propagation.TextMapPropagator

	handlers map[string]BatchHandler
	// log reports events a filter expression failed on (selectEvents).
	log *slog.Logger
	// handling holds the consumer IDs whose BatchHandler call runs.
	handling        sync.Map
	handlerReturned func()
	// receiptDeferred signals a test that a 2xx's receipt waits for its
	// body.
	receiptDeferred func()
}

// callbackURL is the URL consumer id calls back on.
func (x *executor) callbackURL(id string) string {
	return x.callbackPrefix + id
}

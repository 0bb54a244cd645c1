// Package pushreceiver is an event-push endpoint as a receiver would write
// one with package receiver: it checks each POST's signature, handles each
// delivery id once (receiver.Dedup), and answers 2xx. A retry of a
// delivery it has handled, which the engine sends when it did not learn of
// the 2xx, gets a 2xx again and is not handled twice.
package pushreceiver

import (
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/streamhooks/webhooks/receiver"
)

// The delivery ids remembered: a real receiver records them with its
// work, in one transaction; the demos' retries all come within the window.
const (
	dedupWindow   = 24 * time.Hour
	dedupCapacity = 100_000
)

// Receiver is an http.Handler for a subscription's event-push POSTs.
type Receiver struct {
	verifier *receiver.Verifier
	handle   func(*receiver.EventsPayload) error
	dedup    *receiver.Dedup
	// mu keeps the calls of handle one at a time, in arrival order.
	mu sync.Mutex
}

// New returns a receiver for a subscription with secret, which calls
// handle once per delivery id, in the order the batches arrive. An error
// from handle answers 500, and the engine sends the batch again.
func New(secret string, handle func(*receiver.EventsPayload) error) (*Receiver, error) {
	v, err := receiver.NewVerifier(receiver.WithSecret(secret))
	if err != nil {
		return nil, err
	}
	return &Receiver{verifier: v, handle: handle, dedup: receiver.NewDedup(dedupWindow, dedupCapacity, nil)}, nil
}

func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	// The signature covers the raw body: ParseEvents checks it before
	// decoding.
	p, err := r.verifier.ParseEvents(req)
	if errors.Is(err, receiver.ErrInvalidSignature) {
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	if err != nil || p.DeliveryID != req.Header.Get(receiver.IDHeader) {
		http.Error(w, "not an event batch", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.dedup.Handle(req.Context(), p.DeliveryID, func() error { return r.handle(p) }); err != nil {
		http.Error(w, "handling failed", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

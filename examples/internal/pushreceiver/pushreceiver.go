// Package pushreceiver is an event-push endpoint as a receiver would write
// one: it checks each POST's signature, handles each delivery id once, and
// answers 2xx. A retry of a delivery it has handled, which the engine sends
// when it did not learn of the 2xx, gets a 2xx again and is not handled
// twice.
package pushreceiver

import (
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"time"

	webhooks "github.com/streamhooks/webhooks"
)

// maxBody bounds a POST's body: a batch is at most its max_bytes of events
// and their encoding.
const maxBody = 64 << 20

// Receiver is an http.Handler for a subscription's event-push POSTs.
type Receiver struct {
	secret string
	handle func(*webhooks.EventsPayload) error
	now    func() time.Time

	mu sync.Mutex
	// seen are the delivery ids handled. A real receiver records them
	// with its work, in one transaction, and forgets them after a while.
	seen map[string]bool
}

// New returns a receiver for a subscription with secret, which calls
// handle once per delivery id, in the order the batches arrive. An error
// from handle answers 500, and the engine sends the batch again.
func New(secret string, handle func(*webhooks.EventsPayload) error) *Receiver {
	return &Receiver{secret: secret, handle: handle, now: time.Now, seen: map[string]bool{}}
}

func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, maxBody))
	if err != nil {
		http.Error(w, "unreadable body", http.StatusBadRequest)
		return
	}
	// The signature covers the raw body: check it before decoding.
	if err := webhooks.VerifySignature(r.secret, req.Header.Get(webhooks.SignatureHeader), body, r.now(), webhooks.DefaultSignatureTolerance); err != nil {
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	var p webhooks.EventsPayload
	if err := json.Unmarshal(body, &p); err != nil || p.DeliveryID == "" || p.DeliveryID != req.Header.Get(webhooks.DeliveryIDHeader) {
		http.Error(w, "not an event batch", http.StatusBadRequest)
		return
	}
	// One batch of a stream is in flight at a time, so holding the lock
	// while handling keeps a retry from racing its first attempt.
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.seen[p.DeliveryID] {
		if err := r.handle(&p); err != nil {
			http.Error(w, "handling failed", http.StatusInternalServerError)
			return
		}
		r.seen[p.DeliveryID] = true
	}
	w.WriteHeader(http.StatusNoContent)
}

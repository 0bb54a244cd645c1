package memstore

import (
	"strings"
	"sync"
	"time"

	webhooks "github.com/streamhooks/webhooks"
)

// entry is a stored consumer, kept small because idle consumers may number
// in the millions. As the durable Stores keep a row, it holds the fields
// the indexes need and the rest as Consumer.MarshalData encodes it: one
// byte slice of about a hundred bytes where a Consumer is over three
// hundred, with a few more objects for its lists and strings. A wake
// rewrites that slice in place when the new value fits, so what a woken
// consumer keeps is not allocated among the wake's garbage, where it
// would pin partly empty memory that the GC cannot give back.
//
// id, sub and primary never change. The other fields change only under
// both mu and Store.mu, so either lock suffices to read them; heapPos
// belongs to Store.mu.
type entry struct {
	mu               sync.Mutex
	heapPos          int32 // -1 while deadline is zero
	deleted          bool
	id, sub, primary string
	state            webhooks.ConsumerState
	deadline         time.Time
	data             []byte
	// attempts is the consumer's delivery log, empty while it has none.
	// It belongs to Store.mu, and goes with the entry.
	attempts attemptLog
}

// withWakeRoom returns c's first data, data, in a slice with room for c
// woken: with a wake ID, the tails of its streams and the streams that
// triggered the wake. Its wakes then rewrite the slice in place. Offsets
// are fixed-width for a stream; one not known yet (OffsetNone) is given
// the room of a wide one.
func withWakeRoom(c *webhooks.Consumer, data []byte) []byte {
	w := *c
	w.Epoch++
	w.WakeID = "w_" + strings.Repeat("0", 32)
	w.Streams = make([]webhooks.StreamOffset, len(c.Streams))
	w.TriggeredBy = make([]string, len(c.Streams))
	for i, so := range c.Streams {
		if so.Offset == webhooks.OffsetNone {
			so.Offset = strings.Repeat("0", wideOffset)
		}
		w.Streams[i], w.TriggeredBy[i] = so, so.Path
	}
	w.WakeTails = w.Streams
	w.Attempt, w.InFlight = 1, true
	woken, err := w.MarshalData()
	if err != nil {
		return data
	}
	return append(make([]byte, 0, max(len(woken), len(data))), data...)
}

// wideOffset is the length of a wide offset: a Durable Streams offset of
// two 16-digit parts.
const wideOffset = 33

// set stores c, which MarshalData encoded as data, as e's value, but for
// the fields that never change. data becomes e's unless e's slice holds it.
func (e *entry) set(c *webhooks.Consumer, data []byte) {
	e.state, e.deadline = c.State, c.Deadline
	if cap(e.data) >= len(data) {
		e.data = append(e.data[:0], data...)
	} else {
		e.data = data
	}
}

// consumer decodes e's value into a Consumer of the caller's own.
func (e *entry) consumer() *webhooks.Consumer {
	c := &webhooks.Consumer{ID: e.id, SubscriptionID: e.sub, PrimaryStream: e.primary, State: e.state, Deadline: e.deadline}
	if err := c.UnmarshalData(e.data); err != nil {
		// e.data is what MarshalData wrote.
		panic("memstore: consumer " + e.id + ": " + err.Error())
	}
	return c
}

package inbox

import (
	"crypto/sha256"
	"sync"
	"time"
)

// dedup remembers the delivery ids appended within a window, up to a
// capacity, forgetting the oldest first. It keeps a fixed-size digest of
// each id, so an id's length does not matter to its memory.
type dedup struct {
	window   time.Duration
	capacity int

	mu   sync.Mutex
	ids  map[idKey]struct{}
	ring []seenID // in the order added, which is that of time, from head
	head int
	n    int // ids remembered
}

// idKey is a digest of a provider name and a delivery id; 128 bits make a
// collision, which would drop a delivery, negligible.
type idKey [16]byte

type seenID struct {
	key idKey
	at  time.Time
}

func newDedup(window time.Duration, capacity int) *dedup {
	return &dedup{window: window, capacity: capacity, ids: make(map[idKey]struct{})}
}

func keyOf(provider, id string) idKey {
	h := sha256.New()
	h.Write([]byte(provider))
	h.Write([]byte{0})
	h.Write([]byte(id))
	var k idKey
	copy(k[:], h.Sum(nil))
	return k
}

// has reports whether the provider's id was added within the window
// before now.
func (d *dedup) has(provider, id string, now time.Time) bool {
	k := keyOf(provider, id)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.expire(now)
	_, ok := d.ids[k]
	return ok
}

// add remembers the provider's id as added at now.
func (d *dedup) add(provider, id string, now time.Time) {
	k := keyOf(provider, id)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.expire(now)
	if _, ok := d.ids[k]; ok {
		return // a concurrent duplicate was appended too; the first time counts
	}
	if d.n == d.capacity {
		d.pop()
	}
	if d.n == len(d.ring) {
		d.grow()
	}
	d.ids[k] = struct{}{}
	d.ring[(d.head+d.n)%len(d.ring)] = seenID{key: k, at: now}
	d.n++
}

// grow doubles the ring, up to the capacity, so that memory follows use.
func (d *dedup) grow() {
	ring := make([]seenID, min(max(2*len(d.ring), 64), d.capacity))
	for i := range d.n {
		ring[i] = d.ring[(d.head+i)%len(d.ring)]
	}
	d.ring, d.head = ring, 0
}

// expire forgets the ids added a window or more before now.
func (d *dedup) expire(now time.Time) {
	for d.n > 0 && now.Sub(d.ring[d.head].at) >= d.window {
		d.pop()
	}
}

// pop forgets the oldest id.
func (d *dedup) pop() {
	delete(d.ids, d.ring[d.head].key)
	d.head = (d.head + 1) % len(d.ring)
	d.n--
}

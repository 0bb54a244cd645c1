package receiver

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// handleCount calls d.Handle for id with a handler that counts its calls
// and fails with fail.
func handleCount(t *testing.T, d *Dedup, id string, calls *int, fail error) bool {
	t.Helper()
	dup, err := d.Handle(context.Background(), id, func() error {
		*calls++
		return fail
	})
	if !errors.Is(err, fail) {
		t.Fatalf("Handle(%q) = %v, want %v", id, err, fail)
	}
	return dup
}

func TestDedupHandlesOnceWithinWindow(t *testing.T) {
	clock := &fakeClock{now: testSignTime}
	d := NewDedup(time.Hour, 10, clock.Now)
	calls := 0
	if handleCount(t, d, "msg_1", &calls, nil) {
		t.Fatal("the first delivery is a duplicate")
	}
	clock.Add(time.Hour - time.Nanosecond)
	if !handleCount(t, d, "msg_1", &calls, nil) || calls != 1 {
		t.Fatalf("a retry within the window was handled again: %d calls", calls)
	}
	clock.Add(time.Nanosecond)
	if handleCount(t, d, "msg_1", &calls, nil) || calls != 2 {
		t.Fatalf("after the window: %d calls, want 2", calls)
	}
}

func TestDedupForgetsFailures(t *testing.T) {
	d := NewDedup(time.Hour, 10, (&fakeClock{now: testSignTime}).Now)
	calls := 0
	busy := errors.New("busy")
	handleCount(t, d, "msg_1", &calls, busy)
	if handleCount(t, d, "msg_1", &calls, nil) || calls != 2 {
		t.Fatalf("the retry of a failed delivery was not handled: %d calls", calls)
	}
	if !handleCount(t, d, "msg_1", &calls, nil) || calls != 2 {
		t.Fatalf("handled a third time: %d calls", calls)
	}
}

func TestDedupEmptyID(t *testing.T) {
	d := NewDedup(time.Hour, 10, nil)
	calls := 0
	handleCount(t, d, "", &calls, nil)
	if handleCount(t, d, "", &calls, nil) || calls != 2 {
		t.Fatalf("an empty id was deduplicated: %d calls", calls)
	}
}

// TestDedupBounded: at most capacity ids are remembered; the oldest go
// first, however long their window has left.
func TestDedupBounded(t *testing.T) {
	clock := &fakeClock{now: testSignTime}
	d := NewDedup(time.Hour, 3, clock.Now)
	calls := 0
	for _, id := range []string{"a", "b", "c", "d"} {
		handleCount(t, d, id, &calls, nil)
		clock.Add(time.Second)
	}
	if len(d.handled) != 3 {
		t.Fatalf("remembers %d ids, want 3", len(d.handled))
	}
	for _, id := range []string{"b", "c", "d"} {
		if !handleCount(t, d, id, &calls, nil) {
			t.Errorf("%s was forgotten", id)
		}
	}
	if handleCount(t, d, "a", &calls, nil) {
		t.Error("a, the oldest, was remembered beyond capacity")
	}
	// Expired ids go too, and the queue does not grow without bound.
	for i := range 1000 {
		handleCount(t, d, string(rune('A'+i%26))+time.Duration(i).String(), &calls, nil)
		clock.Add(time.Hour)
	}
	if len(d.handled) > 3 || len(d.order)-d.head > 3 || cap(d.order) > 16 {
		t.Fatalf("map %d, queue %d of cap %d after 1000 ids", len(d.handled), len(d.order)-d.head, cap(d.order))
	}
}

// TestDedupConcurrentDuplicate: a duplicate that arrives while the first
// is being handled waits for it, and is not handled if it succeeded.
func TestDedupConcurrentDuplicate(t *testing.T) {
	d := NewDedup(time.Hour, 10, nil)
	entered, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := d.Handle(context.Background(), "msg_1", func() error {
			close(entered)
			<-release
			return nil
		})
		first <- err
	}()
	<-entered
	second := make(chan bool, 1)
	go func() {
		dup, err := d.Handle(context.Background(), "msg_1", func() error {
			t.Error("the duplicate was handled while the first ran")
			return nil
		})
		if err != nil {
			t.Error(err)
		}
		second <- dup
	}()
	// The duplicate cannot finish until the first does.
	select {
	case <-second:
		t.Fatal("the duplicate returned while the first was running")
	default:
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if !<-second {
		t.Fatal("the duplicate was not reported as one")
	}

	// A waiter whose context ends gives up.
	entered2, release2 := make(chan struct{}), make(chan struct{})
	go func() {
		_, _ = d.Handle(context.Background(), "msg_2", func() error {
			close(entered2)
			<-release2
			return nil
		})
	}()
	<-entered2
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := d.Handle(ctx, "msg_2", func() error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: err = %v", err)
	}
	close(release2)
}

func TestDedupMiddleware(t *testing.T) {
	d := NewDedup(time.Hour, 10, nil)
	calls := 0
	status := http.StatusInternalServerError
	h := d.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if status != http.StatusOK {
			w.WriteHeader(status)
		} // else: net/http's implicit 200
	}))
	serve := func(id string) int {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.Header.Set(IDHeader, id)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec.Code
	}
	if got := serve("msg_1"); got != http.StatusInternalServerError || calls != 1 {
		t.Fatalf("failing handler: %d, %d calls", got, calls)
	}
	status = http.StatusUnauthorized // a forgery refused records nothing
	if got := serve("msg_1"); got != http.StatusUnauthorized || calls != 2 {
		t.Fatalf("refusing handler: %d, %d calls", got, calls)
	}
	status = http.StatusOK
	if got := serve("msg_1"); got != http.StatusOK || calls != 3 {
		t.Fatalf("succeeding handler: %d, %d calls", got, calls)
	}
	if got := serve("msg_1"); got != http.StatusOK || calls != 3 {
		t.Fatalf("duplicate: %d, %d calls; want 200 without a call", got, calls)
	}
	if got := serve("msg_2"); got != http.StatusOK || calls != 4 {
		t.Fatalf("another id: %d, %d calls", got, calls)
	}
}

func TestNewDedupPanics(t *testing.T) {
	for _, tt := range []struct {
		window   time.Duration
		capacity int
	}{{0, 1}, {time.Hour, 0}, {-time.Hour, 1}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewDedup(%v, %d) did not panic", tt.window, tt.capacity)
				}
			}()
			NewDedup(tt.window, tt.capacity, nil)
		}()
	}
}

package mockclock

import (
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
)

var start = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// leftover arms tm for at and leaves it unfired, as a re-arm in Set's last
// moment does: Reset registers a timer without firing it. (Creating a timer
// would fire a leftover one, and leave the time at that one's.)
func leftover(c *Clock, tm *clock.Timer, at time.Time) <-chan time.Time {
	tm.Stop()
	tm.Reset(at.Sub(c.Now()))
	return tm.C
}

func fired(ch <-chan time.Time) (time.Time, bool) {
	select {
	case at := <-ch:
		return at, true
	default:
		return time.Time{}, false
	}
}

// Add fires what is due by its time, a timer left due before it at that
// timer's own time, and nothing later; the time ends at the new time.
func TestAddFiresWhatIsDue(t *testing.T) {
	c := New()
	c.Set(start)
	soon := c.Timer(time.Second)
	later := c.Timer(time.Hour)
	a, b := c.Timer(time.Hour), c.Timer(time.Hour)
	early := leftover(c, a, start.Add(-time.Minute))
	now := leftover(c, b, start)
	c.Add(time.Second)
	if at, ok := fired(early); !ok || !at.Equal(start.Add(-time.Minute)) {
		t.Fatalf("the earlier timer fired %v at %v, want at %v", ok, at, start.Add(-time.Minute))
	}
	if _, ok := fired(now); !ok {
		t.Fatal("the timer due at the old time did not fire")
	}
	if at, ok := fired(soon.C); !ok || !at.Equal(start.Add(time.Second)) {
		t.Fatalf("the timer due at the new time fired %v at %v", ok, at)
	}
	if _, ok := fired(later.C); ok {
		t.Fatal("a timer not yet due fired")
	}
	if got := c.Now(); !got.Equal(start.Add(time.Second)) {
		t.Fatalf("now %v, want %v", got, start.Add(time.Second))
	}
}

// mover is a clock a test moves: a Clock, or the clock.Mock it fixes.
type mover interface {
	clock.Clock
	Add(time.Duration)
}

// movesWhileTimersAreCreated moves c while goroutines create timers and wait
// on some, and reports whether the moves ended. A timer fired twice blocks
// the second send with the Mock's lock held, and the moves never end.
func movesWhileTimersAreCreated(c mover, moves int) bool {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 { // waiting on timers, as the engine's loops do
		wg.Go(func() {
			for {
				tm := c.Timer(time.Second)
				select {
				case <-stop:
					tm.Stop()
					return
				case <-tm.C:
				}
				tm.Stop()
			}
		})
	}
	for range 2 { // creating timers, as the engine's requests do
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				c.Timer(time.Hour).Stop()
			}
		})
	}
	moved := make(chan struct{})
	go func() {
		defer close(moved)
		for range moves {
			c.Add(time.Second)
		}
	}()
	select {
	case <-moved:
		close(stop)
		wg.Wait()
		return true
	case <-time.After(30 * time.Second): // only a hung clock waits this long
		return false // its goroutines stay blocked
	}
}

// A Clock fires each timer once while other goroutines create timers. On a
// clock.Mock the same moves hang in most runs (clock.Mock hung in 4 of 5
// runs of 300 moves).
func TestTimersCreatedWhileMovingFireOnce(t *testing.T) {
	c := New()
	c.Set(start)
	if !movesWhileTimersAreCreated(c, 300) {
		t.Fatal("the clock hung: a timer fired twice blocked on its full channel")
	}
}

// Creating a timer fires a timer left due, as a Mock's creation does, and
// leaves the time where it was, which a Mock's does not.
func TestTimerCreationFiresWhatIsDueAndKeepsTheTime(t *testing.T) {
	c := New()
	c.Set(start)
	early := leftover(c, c.Timer(time.Hour), start.Add(-time.Minute))
	now := leftover(c, c.Timer(time.Hour), start)
	due := c.Timer(0)
	later := c.Timer(time.Second)
	for name, ch := range map[string]<-chan time.Time{"the earlier leftover": early, "the leftover due now": now, "the timer due at once": due.C} {
		if _, ok := fired(ch); !ok {
			t.Fatalf("%s did not fire", name)
		}
	}
	if _, ok := fired(later.C); ok {
		t.Fatal("a timer not yet due fired")
	}
	if got := c.Now(); !got.Equal(start) {
		t.Fatalf("now %v, want %v", got, start)
	}
}

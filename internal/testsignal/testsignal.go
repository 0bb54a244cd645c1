// Package testsignal lets a test wait for something the library did,
// instead of polling for its effect or sleeping, after River's package of
// the same name.
package testsignal

// Signal is a point in the library's code that a test may wait on. It is
// off until a test gives it a channel, and then each Send puts a token in
// that channel unless one is there already: signals sent while the test is
// busy merge into one, upon which it looks again at what it waits for.
// The zero value is off, and Send then costs a nil check.
type Signal struct {
	ch chan<- struct{}
}

// Set turns s on, sending to ch, which should have a buffer of one. Call
// it before the code that sends on s starts.
func (s *Signal) Set(ch chan<- struct{}) { s.ch = ch }

// Send signals the test, if s is on, without waiting.
func (s *Signal) Send() {
	if s.ch == nil {
		return
	}
	select {
	case s.ch <- struct{}{}:
	default:
	}
}

package receiver

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeEngine plays the server side of the callback API. respond is called
// once per callback, serially, with the call's number (from 1).
type fakeEngine struct {
	*httptest.Server
	mu    sync.Mutex
	calls []engineCall
}

type engineCall struct {
	auth string
	req  CallbackRequest
}

func newFakeEngine(t *testing.T, respond func(n int, c engineCall) (status int, body string)) *fakeEngine {
	t.Helper()
	e := &fakeEngine{}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("callback %s with Content-Type %q", r.Method, r.Header.Get("Content-Type"))
		}
		var c engineCall
		c.auth = r.Header.Get("Authorization")
		if err := json.NewDecoder(r.Body).Decode(&c.req); err != nil {
			t.Errorf("decoding callback: %v", err)
		}
		e.mu.Lock()
		e.calls = append(e.calls, c)
		n := len(e.calls)
		e.mu.Unlock()
		status, body := respond(n, c)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(e.Close)
	return e
}

func (e *fakeEngine) recorded() []engineCall {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]engineCall(nil), e.calls...)
}

func testNotification(callback string) *Notification {
	return &Notification{
		ConsumerID:    "sub:%2Fa",
		Epoch:         7,
		WakeID:        "w_1",
		PrimaryStream: "/a",
		Streams:       []StreamOffset{{Path: "/a", Offset: "-1"}},
		TriggeredBy:   []string{"/a"},
		Callback:      callback,
		Token:         "tok-0",
	}
}

func signedRequest(t *testing.T, body string) *http.Request {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(body))
	r.Header.Set(SignatureHeader, signStreamhooks(testSecret, testSignTime, []byte(body)))
	return r
}

func TestParseNotification(t *testing.T) {
	want := testNotification("https://streams.example.com/callback/sub:%2Fa")
	body, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	// A field the server may add later must not break consumers.
	body = append(body[:len(body)-1], `,"added_later":1}`...)
	got, err := verifierAt(t, testSignTime.Add(time.Minute), testSecret).ParseNotification(signedRequest(t, string(body)))
	if err != nil {
		t.Fatalf("ParseNotification: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseNotification = %+v, want %+v", got, want)
	}
}

func TestParseNotificationRejectsSignature(t *testing.T) {
	const body = `{"consumer_id":"c","epoch":1,"wake_id":"w","callback":"https://x/cb","token":"t"}`
	if _, err := verifierAt(t, testSignTime, testSecret).ParseNotification(signedRequest(t, body)); err != nil {
		t.Fatalf("control: ParseNotification: %v", err)
	}

	r := signedRequest(t, body)
	r.Header.Del(SignatureHeader)
	if _, err := verifierAt(t, testSignTime, testSecret).ParseNotification(r); !errors.Is(err, ErrInvalidSignature) {
		t.Errorf("unsigned: err = %v, want ErrInvalidSignature", err)
	}
	if _, err := verifierAt(t, testSignTime, "whsec_other").ParseNotification(signedRequest(t, body)); !errors.Is(err, ErrInvalidSignature) {
		t.Errorf("wrong secret: err = %v, want ErrInvalidSignature", err)
	}
	r = signedRequest(t, body)
	r.Body = io.NopCloser(strings.NewReader(strings.Replace(body, `"epoch":1`, `"epoch":2`, 1)))
	if _, err := verifierAt(t, testSignTime, testSecret).ParseNotification(r); !errors.Is(err, ErrInvalidSignature) {
		t.Errorf("tampered: err = %v, want ErrInvalidSignature", err)
	}
	if _, err := verifierAt(t, testSignTime.Add(time.Hour), testSecret).ParseNotification(signedRequest(t, body)); !errors.Is(err, ErrInvalidSignature) {
		t.Errorf("replayed: err = %v, want ErrInvalidSignature", err)
	}
}

func TestParseNotificationRejectsBody(t *testing.T) {
	const valid = `{"consumer_id":"c","epoch":1,"wake_id":"w","callback":"https://x/cb","token":"t"}`
	tests := map[string]string{
		"too large":        `{"consumer_id":"` + strings.Repeat("x", MaxNotificationBytes) + `"}`,
		"not JSON":         `consumer_id=c`,
		"trailing data":    valid + `{}`,
		"wrong type":       strings.Replace(valid, `"epoch":1`, `"epoch":"1"`, 1),
		"no consumer_id":   strings.Replace(valid, `"consumer_id":"c"`, `"consumer_id":""`, 1),
		"no wake_id":       strings.Replace(valid, `"wake_id":"w",`, ``, 1),
		"no callback":      strings.Replace(valid, `"callback":"https://x/cb",`, ``, 1),
		"no token":         strings.Replace(valid, `,"token":"t"`, ``, 1),
		"array not object": `[` + valid + `]`,
	}
	for name, body := range tests {
		t.Run(name, func(t *testing.T) {
			n, err := verifierAt(t, testSignTime, testSecret).ParseNotification(signedRequest(t, body))
			if err == nil {
				t.Fatalf("ParseNotification = %+v, want error", n)
			}
			if errors.Is(err, ErrInvalidSignature) {
				t.Fatalf("err = %v: a correctly signed body is not a signature failure", err)
			}
		})
	}
}

func TestCallbackClientTokensAndWakeID(t *testing.T) {
	e := newFakeEngine(t, func(n int, c engineCall) (int, string) {
		switch n {
		case 1:
			return 409, `{"ok":false,"error":{"code":"INVALID_OFFSET","message":"beyond tail"},"token":"tok-1"}`
		case 2:
			return 200, `{"ok":true,"token":"tok-2","streams":[{"path":"/a","offset":"5"}]}`
		default: // no token: the client keeps the one it has
			return 200, `{"ok":true,"streams":[{"path":"/a","offset":"5"}]}`
		}
	})
	c := NewCallbackClient(testNotification(e.URL), e.Client())
	ctx := context.Background()

	_, err := c.Ack(ctx, StreamOffset{Path: "/a", Offset: "99"})
	var ce *CallbackError
	if !errors.As(err, &ce) || ce.Code != CodeInvalidOffset {
		t.Fatalf("first Ack: err = %v, want INVALID_OFFSET", err)
	}
	resp, err := c.Ack(ctx, StreamOffset{Path: "/a", Offset: "5"})
	if err != nil {
		t.Fatalf("second Ack: %v", err)
	}
	if want := []StreamOffset{{Path: "/a", Offset: "5"}}; !reflect.DeepEqual(resp.Streams, want) {
		t.Errorf("Streams = %v, want %v", resp.Streams, want)
	}
	wrongEpoch := int64(1)
	if _, err := c.Send(ctx, CallbackRequest{Epoch: &wrongEpoch, WakeID: "w_other", Subscribe: []string{"/b"}}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if _, err := c.Done(ctx); err != nil {
		t.Fatalf("Done: %v", err)
	}
	if got := c.Token(); got != "tok-2" {
		t.Errorf("Token() = %q, want tok-2", got)
	}

	calls := e.recorded()
	wantAuth := []string{"Bearer tok-0", "Bearer tok-1", "Bearer tok-2", "Bearer tok-2"}
	wantWake := []string{"w_1", "w_1", "", ""} // until the first success
	if len(calls) != len(wantAuth) {
		t.Fatalf("engine got %d calls, want %d", len(calls), len(wantAuth))
	}
	for i, call := range calls {
		if call.auth != wantAuth[i] {
			t.Errorf("call %d: Authorization %q, want %q", i+1, call.auth, wantAuth[i])
		}
		if call.req.WakeID != wantWake[i] {
			t.Errorf("call %d: wake_id %q, want %q", i+1, call.req.WakeID, wantWake[i])
		}
		if call.req.Epoch == nil || *call.req.Epoch != 7 {
			t.Errorf("call %d: epoch %v, want 7", i+1, call.req.Epoch)
		}
	}
	if want := []StreamOffset{{Path: "/a", Offset: "99"}}; !reflect.DeepEqual(calls[0].req.Acks, want) {
		t.Errorf("call 1: acks %v, want %v", calls[0].req.Acks, want)
	}
	if want := []string{"/b"}; !reflect.DeepEqual(calls[2].req.Subscribe, want) {
		t.Errorf("call 3: subscribe %v, want %v", calls[2].req.Subscribe, want)
	}
	if !calls[3].req.Done {
		t.Error("call 4: done not set")
	}
}

func TestCallbackClientRetriesTokenExpiredOnce(t *testing.T) {
	e := newFakeEngine(t, func(n int, c engineCall) (int, string) {
		if c.auth != "Bearer tok-new" {
			return 401, `{"ok":false,"error":{"code":"TOKEN_EXPIRED","message":"expired"},"token":"tok-new"}`
		}
		return 200, `{"ok":true,"token":"tok-next","streams":[]}`
	})
	c := NewCallbackClient(testNotification(e.URL), e.Client())
	if _, err := c.Ack(context.Background(), StreamOffset{Path: "/a", Offset: "3"}); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	calls := e.recorded()
	if len(calls) != 2 {
		t.Fatalf("engine got %d calls, want 2", len(calls))
	}
	if !reflect.DeepEqual(calls[0].req, calls[1].req) {
		t.Errorf("retry sent %+v, want the same request %+v", calls[1].req, calls[0].req)
	}
	if got := c.Token(); got != "tok-next" {
		t.Errorf("Token() = %q, want tok-next", got)
	}
}

func TestCallbackClientTokenExpiredRetryIsBounded(t *testing.T) {
	e := newFakeEngine(t, func(n int, c engineCall) (int, string) {
		return 401, `{"ok":false,"error":{"code":"TOKEN_EXPIRED","message":"expired"},"token":"tok-again"}`
	})
	c := NewCallbackClient(testNotification(e.URL), e.Client())
	_, err := c.Done(context.Background())
	var ce *CallbackError
	if !errors.As(err, &ce) || ce.Code != CodeTokenExpired || ce.StatusCode != 401 {
		t.Fatalf("Done: err = %v, want 401 TOKEN_EXPIRED", err)
	}
	if n := len(e.recorded()); n != 2 {
		t.Fatalf("engine got %d calls, want 2", n)
	}
}

func TestCallbackClientErrors(t *testing.T) {
	tests := []struct {
		name      string
		status    int
		body      string
		want      *CallbackError // nil: a non-CallbackError error
		wantToken string
	}{
		{"stale epoch", 409, `{"ok":false,"error":{"code":"STALE_EPOCH","message":"epoch 7 < 8"},"token":"tok-x"}`,
			&CallbackError{409, CodeStaleEpoch, "epoch 7 < 8"}, "tok-x"},
		{"consumer gone", 410, `{"ok":false,"error":{"code":"CONSUMER_GONE","message":"gone"}}`,
			&CallbackError{410, CodeConsumerGone, "gone"}, "tok-0"},
		{"token invalid", 401, `{"ok":false,"error":{"code":"TOKEN_INVALID","message":"bad"}}`,
			&CallbackError{401, CodeTokenInvalid, "bad"}, "tok-0"},
		{"expired without token", 401, `{"ok":false,"error":{"code":"TOKEN_EXPIRED","message":"expired"}}`,
			&CallbackError{401, CodeTokenExpired, "expired"}, "tok-0"},
		{"proxy error page", 502, `<html>bad gateway</html>`,
			&CallbackError{502, "", "Bad Gateway"}, "tok-0"},
		{"ok false on 200", 200, `{"ok":false}`,
			&CallbackError{200, "", ""}, "tok-0"},
		{"garbage on 200", 200, `{"ok":tru`, nil, "tok-0"},
		{"oversized", 200, `{"ok":true,"token":"` + strings.Repeat("x", maxCallbackResponseBytes) + `"}`, nil, "tok-0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newFakeEngine(t, func(int, engineCall) (int, string) { return tt.status, tt.body })
			c := NewCallbackClient(testNotification(e.URL), e.Client())
			resp, err := c.Send(context.Background(), CallbackRequest{})
			if err == nil {
				t.Fatalf("Send = %+v, want error", resp)
			}
			var ce *CallbackError
			if tt.want == nil {
				if errors.As(err, &ce) {
					t.Fatalf("err = %#v, want a non-CallbackError", err)
				}
			} else if !errors.As(err, &ce) || *ce != *tt.want {
				t.Fatalf("err = %#v, want %#v", err, tt.want)
			}
			if got := c.Token(); got != tt.wantToken {
				t.Errorf("Token() = %q, want %q", got, tt.wantToken)
			}
			if n := len(e.recorded()); n != 1 {
				t.Errorf("engine got %d calls, want 1", n)
			}
		})
	}
}

// TestCallbackClientKeepsFreshestToken makes an older call's response
// arrive after a newer one's: the newer token must win.
func TestCallbackClientKeepsFreshestToken(t *testing.T) {
	firstArrived := make(chan struct{})
	releaseFirst := make(chan struct{})
	e := newFakeEngine(t, func(n int, c engineCall) (int, string) {
		if n == 1 {
			close(firstArrived)
			<-releaseFirst
			return 200, `{"ok":true,"token":"tok-old","streams":[]}`
		}
		return 200, `{"ok":true,"token":"tok-new","streams":[]}`
	})
	c := NewCallbackClient(testNotification(e.URL), e.Client())
	ctx := context.Background()
	first := make(chan error, 1)
	go func() {
		_, err := c.Ack(ctx, StreamOffset{Path: "/a", Offset: "1"})
		first <- err
	}()
	<-firstArrived
	if _, err := c.Ack(ctx, StreamOffset{Path: "/a", Offset: "2"}); err != nil {
		t.Fatalf("second Ack: %v", err)
	}
	close(releaseFirst)
	if err := <-first; err != nil {
		t.Fatalf("first Ack: %v", err)
	}
	if got := c.Token(); got != "tok-new" {
		t.Fatalf("Token() = %q, want tok-new", got)
	}
	// Both calls started before either succeeded, so both claim the wake.
	for i, call := range e.recorded() {
		if call.req.WakeID != "w_1" {
			t.Errorf("call %d: wake_id %q, want w_1", i+1, call.req.WakeID)
		}
	}
}

func TestCallbackErrorMessage(t *testing.T) {
	err := error(&CallbackError{StatusCode: 409, Code: CodeStaleEpoch, Message: "epoch 7 < 8"})
	if got, want := err.Error(), "receiver: callback failed: 409 STALE_EPOCH: epoch 7 < 8"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}

func TestCallbackClientDefaultHTTPClient(t *testing.T) {
	e := newFakeEngine(t, func(int, engineCall) (int, string) { return 200, `{"ok":true,"streams":[]}` })
	if _, err := NewCallbackClient(testNotification(e.URL), nil).Done(context.Background()); err != nil {
		t.Fatalf("Done: %v", err)
	}
}

func TestCallbackClientTransportFailure(t *testing.T) {
	e := newFakeEngine(t, func(int, engineCall) (int, string) { return 200, `{"ok":true}` })
	e.Close()
	c := NewCallbackClient(testNotification(e.URL), e.Client())
	_, err := c.Done(context.Background())
	var ce *CallbackError
	if err == nil || errors.As(err, &ce) {
		t.Fatalf("Done on a closed server: err = %v, want a transport error", err)
	}
	if n := len(e.recorded()); n != 0 {
		t.Fatalf("engine got %d calls", n)
	}
}

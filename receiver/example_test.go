package receiver_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/streamhooks/webhooks/internal/webhooksig"
	"github.com/streamhooks/webhooks/receiver"
)

// sign is the engine's spec 001 signature of body by secret at t.
func sign(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",sha256=" + hex.EncodeToString(webhooksig.StreamhooksMAC(secret, ts, body))
}

func ExampleVerifier_Verify() {
	secret := "whsec_example"
	body := []byte(`{"consumer_id":"my-sub:%2Fagents%2Ftask-123","epoch":7}`)
	signedAt := time.Unix(1704067200, 0)
	h := http.Header{receiver.SignatureHeader: {sign(secret, signedAt, body)}}
	fmt.Println(h.Get(receiver.SignatureHeader))

	// A handler passes the raw body and the headers.
	now := signedAt.Add(time.Minute)
	v, err := receiver.NewVerifier(receiver.WithSecret(secret), receiver.WithClock(func() time.Time { return now }))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("fresh:", v.Verify(context.Background(), h, body))

	now = now.Add(time.Hour)
	err = v.Verify(context.Background(), h, body)
	fmt.Println("replayed:", errors.Is(err, receiver.ErrInvalidSignature), err)
	// Output:
	// t=1704067200,sha256=562fb20c0d291a175e2d86468c3c9d4db81fd5a033670e1be095075e381e2b0b
	// fresh: <nil>
	// replayed: true receiver: invalid webhook signature: timestamp too old
}

// A receiver moving to a rotated secret holds both until the previous one
// expires: a signature by either verifies.
func ExampleWithSecret_rotation() {
	body := []byte(`{}`)
	at := time.Unix(1704067200, 0)
	v, err := receiver.NewVerifier(
		receiver.WithSecret("whsec_new"),
		receiver.WithSecret("whsec_previous"),
		receiver.WithClock(func() time.Time { return at }))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, secret := range []string{"whsec_new", "whsec_previous", "whsec_unknown"} {
		h := http.Header{receiver.SignatureHeader: {sign(secret, at, body)}}
		fmt.Println(secret, v.Verify(context.Background(), h, body) == nil)
	}
	// Output:
	// whsec_new true
	// whsec_previous true
	// whsec_unknown false
}

// An event-push endpoint: ParseEvents verifies and decodes each batch, and
// Dedup keeps a batch that comes again from being handled twice.
func ExampleVerifier_ParseEvents() {
	const secret = "whsec_example"
	at := time.Unix(1704067200, 0)
	v, err := receiver.NewVerifier(receiver.WithSecret(secret), receiver.WithClock(func() time.Time { return at }))
	if err != nil {
		fmt.Println(err)
		return
	}
	dedup := receiver.NewDedup(24*time.Hour, 100_000, nil)
	endpoint := dedup.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := v.ParseEvents(r)
		switch {
		case errors.Is(err, receiver.ErrInvalidSignature):
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		case err != nil:
			http.Error(w, "bad batch", http.StatusBadRequest)
			return
		}
		fmt.Printf("%s: %d events of %s up to %s\n", p.DeliveryID, len(p.Events), p.Stream, p.Offset)
		w.WriteHeader(http.StatusNoContent)
	}))

	body := `{"subscription_id":"orders","stream":"/orders/1","delivery_id":"msg_1",` +
		`"events":[{"n":1},{"n":2}],"first_offset":"-1","offset":"0002","up_to_date":true}`
	post := func(signature string) int {
		r := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(body))
		r.Header.Set(receiver.IDHeader, "msg_1")
		r.Header.Set(receiver.SignatureHeader, signature)
		w := httptest.NewRecorder()
		endpoint.ServeHTTP(w, r)
		return w.Code
	}
	fmt.Println("forged:", post(sign("whsec_forger", at, []byte(body))))
	fmt.Println("first:", post(sign(secret, at, []byte(body))))
	fmt.Println("again:", post(sign(secret, at, []byte(body))))
	// Output:
	// forged: 401
	// msg_1: 2 events of /orders/1 up to 0002
	// first: 204
	// again: 200
}

// A woken consumer reports progress through its notification's callback:
// here to a stand-in for the engine's callback API.
func ExampleNewCallbackClient() {
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Printf("%s %s\n", r.Header.Get("Authorization"), body)
		_, _ = io.WriteString(w, `{"ok":true,"token":"tok-1","streams":[{"path":"/a","offset":"0005"}]}`)
	}))
	defer engine.Close()

	n := &receiver.Notification{
		ConsumerID: "sub:%2Fa", Epoch: 7, WakeID: "w_1", PrimaryStream: "/a",
		Streams:  []receiver.StreamOffset{{Path: "/a", Offset: "-1"}},
		Callback: engine.URL + "/callback/sub:%2Fa", Token: "tok-0",
	}
	cc := receiver.NewCallbackClient(n, engine.Client())
	ctx := context.Background()
	// The first call claims the wake with its wake_id.
	if _, err := cc.Ack(ctx, receiver.StreamOffset{Path: "/a", Offset: "0005"}); err != nil {
		fmt.Println(err)
		return
	}
	resp, err := cc.Done(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(resp.Streams)
	// Output:
	// Bearer tok-0 {"epoch":7,"wake_id":"w_1","acks":[{"path":"/a","offset":"0005"}]}
	// Bearer tok-1 {"epoch":7,"done":true}
	// [{/a 0005}]
}

package receiver_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/streamhooks/webhooks/receiver"
)

// An endpoint answers the engine's verification challenge before its usual
// path: a subscription created with "verify": true delivers only once its
// endpoint has echoed one.
func ExampleVerifier_AnswerChallenge() {
	const secret = "whsec_example"
	at := time.Unix(1704067200, 0)
	v, err := receiver.NewVerifier(receiver.WithSecret(secret), receiver.WithClock(func() time.Time { return at }))
	if err != nil {
		fmt.Println(err)
		return
	}
	endpoint := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		answered, err := v.AnswerChallenge(w, r)
		switch {
		case errors.Is(err, receiver.ErrInvalidSignature):
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		case err != nil:
			http.Error(w, "bad challenge", http.StatusBadRequest)
			return
		case answered:
			return
		}
		// Not a challenge: parse the delivery as usual (ParseEvents).
		w.WriteHeader(http.StatusNoContent)
	})

	body := `{"type":"webhook.verification","subscription_id":"orders","delivery_id":"msg_1",` +
		`"challenge":"verify_3f9c","sent_at":"2024-01-01T00:00:00Z"}`
	post := func(signer string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(body))
		r.Header.Set(receiver.ChallengeHeader, "verify_3f9c")
		r.Header.Set(receiver.SignatureHeader, sign(signer, at, []byte(body)))
		w := httptest.NewRecorder()
		endpoint.ServeHTTP(w, r)
		return w
	}
	fmt.Println("forged:", post("whsec_forger").Code)
	w := post(secret)
	fmt.Println("signed:", w.Code, w.Body.String())
	// Output:
	// forged: 401
	// signed: 200 {"challenge":"verify_3f9c"}
}

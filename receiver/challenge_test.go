package receiver

import (
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/streamhooks/webhooks/internal/webhooksig"
)

// AnswerChallenge leaves a request without the challenge header alone,
// and refuses a challenge whose header and body disagree, or whose type is
// not a challenge's.
func TestAnswerChallengeRefuses(t *testing.T) {
	const secret = "whsec_test"
	at := time.Unix(1704067200, 0)
	v, err := NewVerifier(WithSecret(secret), WithClock(func() time.Time { return at }))
	if err != nil {
		t.Fatal(err)
	}
	request := func(header, body string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(body))
		if header != "" {
			r.Header.Set(ChallengeHeader, header)
		}
		ts := strconv.FormatInt(at.Unix(), 10)
		r.Header.Set(SignatureHeader, "t="+ts+",sha256="+hex.EncodeToString(webhooksig.StreamhooksMAC(secret, ts, []byte(body))))
		return r
	}
	challenge := `{"type":"webhook.verification","challenge":"verify_1"}`

	w := httptest.NewRecorder()
	r := request("", challenge)
	if ok, err := v.AnswerChallenge(w, r); ok || err != nil {
		t.Fatalf("no header: answered %v, %v", ok, err)
	}
	if body := make([]byte, 1); w.Code != http.StatusOK || w.Body.Len() != 0 {
		t.Fatal("no header: the response was written")
	} else if n, _ := r.Body.Read(body); n != 1 {
		t.Fatal("no header: the body was read")
	}
	for name, c := range map[string][2]string{
		"other header": {"verify_2", challenge},
		"other type":   {"verify_1", `{"type":"webhook.test","challenge":"verify_1"}`},
		"no challenge": {"verify_1", `{"type":"webhook.verification"}`},
	} {
		w := httptest.NewRecorder()
		if ok, err := v.AnswerChallenge(w, request(c[0], c[1])); ok || err == nil || w.Body.Len() != 0 {
			t.Errorf("%s: answered %v, %v, %q", name, ok, err, w.Body.String())
		}
	}
	w = httptest.NewRecorder()
	if ok, err := v.AnswerChallenge(w, request("verify_1", challenge)); !ok || err != nil || w.Body.String() != `{"challenge":"verify_1"}` {
		t.Fatalf("answered %v, %v, %q", ok, err, w.Body.String())
	}
}

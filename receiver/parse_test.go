package receiver

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"
)

const testEvents = `{"subscription_id":"orders","stream":"/orders/1","delivery_id":"msg_1",` +
	`"events":[{"n":1},{"n":2}],"first_offset":"-1","offset":"0002","up_to_date":true,"added_later":1}`

// standardRequest is a POST of body signed in the Standard Webhooks scheme
// with testStandardSecret, as the engine signs event batches of such a
// subscription.
func standardRequest(t *testing.T, id, body string) *http.Request {
	t.Helper()
	sig, err := standardSigner(t, testStandardSecret).Sign(id, testSignTime, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(body))
	r.Header.Set(IDHeader, id)
	r.Header.Set(TimestampHeader, "1704067200")
	r.Header.Set(SignatureHeader, sig)
	return r
}

func TestParseEvents(t *testing.T) {
	want := &EventsPayload{
		SubscriptionID: "orders",
		Stream:         "/orders/1",
		DeliveryID:     "msg_1",
		Events:         []json.RawMessage{json.RawMessage(`{"n":1}`), json.RawMessage(`{"n":2}`)},
		FirstOffset:    "-1",
		Offset:         "0002",
		UpToDate:       true,
	}
	for name, r := range map[string]*http.Request{
		"spec 001": signedRequest(t, testEvents),
		"standard": standardRequest(t, "msg_1", testEvents),
	} {
		got, err := verifierAt(t, testSignTime, testSecret, testStandardSecret).ParseEvents(r)
		if err != nil {
			t.Fatalf("%s: ParseEvents: %v", name, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: ParseEvents = %+v, want %+v", name, got, want)
		}
	}
}

func TestParseEventsRejects(t *testing.T) {
	v := verifierAt(t, testSignTime, testSecret)
	if _, err := v.ParseEvents(signedRequest(t, testEvents)); err != nil {
		t.Fatalf("control: %v", err)
	}
	r := signedRequest(t, testEvents)
	r.Header.Set(SignatureHeader, signStreamhooks("whsec_other", testSignTime, []byte(testEvents)))
	if _, err := v.ParseEvents(r); !errors.Is(err, ErrInvalidSignature) {
		t.Errorf("other secret: err = %v, want ErrInvalidSignature", err)
	}
	if _, err := verifierAt(t, testSignTime.Add(time.Hour), testSecret).ParseEvents(signedRequest(t, testEvents)); !errors.Is(err, ErrInvalidSignature) {
		t.Errorf("replayed: err = %v, want ErrInvalidSignature", err)
	}
	for name, body := range map[string]string{
		"too large":         `{"stream":"` + strings.Repeat("x", MaxEventsBytes) + `"}`,
		"not JSON":          `events`,
		"no subscription":   strings.Replace(testEvents, `"subscription_id":"orders",`, ``, 1),
		"no stream":         strings.Replace(testEvents, `"stream":"/orders/1",`, ``, 1),
		"no delivery_id":    strings.Replace(testEvents, `"delivery_id":"msg_1",`, ``, 1),
		"events not a list": strings.Replace(testEvents, `[{"n":1},{"n":2}]`, `{}`, 1),
	} {
		_, err := v.ParseEvents(signedRequest(t, body))
		if err == nil || errors.Is(err, ErrInvalidSignature) {
			t.Errorf("%s: err = %v, want a decoding error", name, err)
		}
	}
}

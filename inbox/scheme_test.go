package inbox

import (
	"encoding/json"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The expected signatures below were computed independently of this
// package, with Python's hmac, hashlib and base64 modules:
//
//	python3 -c 'import hmac,hashlib; print(hmac.new(KEY, MESSAGE, hashlib.sha256).hexdigest())'
//	python3 -c 'import hmac,hashlib,base64; print(base64.b64encode(hmac.new(KEY, MESSAGE, hashlib.sha256).digest()).decode())'
//
// with KEY and MESSAGE given next to each value.

// record returns a record of body with the given headers, received at t.
func record(body string, t time.Time, kv ...string) *Record {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return &Record{Header: h, Body: []byte(body), ReceivedAt: t}
}

// receivedAt is the receive time of the known-answer records, 1700000000.
var receivedAt = time.Unix(1_700_000_000, 0).UTC()

const (
	// KEY b"It's a Secret to Everybody", MESSAGE b"Hello, World!" (GitHub's
	// documented example, whose published value this is too).
	githubSig = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
	// KEY b"whsec_stripe_test",
	// MESSAGE b'1700000000.{"id":"evt_1","type":"charge.succeeded"}'.
	stripeV1   = "6f3356ce5701dd6223636ac876d42e3d64a5c998dc193818a0dba9df61942206"
	stripeBody = `{"id":"evt_1","type":"charge.succeeded"}`
	// KEY base64.b64decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
	// MESSAGE b'msg_p5jXN8AQM9LWM0D4loKWxJek.1614265330.{"test": 2432232314}'
	// (the Standard Webhooks specification's example), base64.
	standardSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	standardSig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	standardID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	standardTS     = "1614265330"
	standardBody   = `{"test": 2432232314}`
	// KEY b"8f742231b10e8888abcd99yyyzzz85a5",
	// MESSAGE b'v0:1531420618:' + slackBody.
	slackSecret = "8f742231b10e8888abcd99yyyzzz85a5"
	slackSig    = "v0=a45771c0f181b7fb1752e9a26cc1ffb2c428f52ac8ab774ffa4adf8cf2874576"
	slackTS     = "1531420618"
	slackBody   = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&command=%2Fweather&text=94070"
	// KEY b"generic-secret", MESSAGE b'{"n":1}', hex and base64.
	genericHex = "606e14212b7b133bb3fde6abad7f86b41ea64868f2852e7fd8c9cfcfb9bd32fc"
	genericB64 = "YG4UISt7Ezuz/earrX+GtB6mSGjyhS5/2MnPz7m9Mvw="
)

// TestKnownAnswers checks each scheme against a signature computed outside
// Go, and that a changed body, a wrong secret and an empty secret fail.
func TestKnownAnswers(t *testing.T) {
	standardAt := time.Unix(1614265330, 0)
	slackAt := time.Unix(1531420618, 0)
	for _, tc := range []struct {
		name   string
		scheme Scheme
		wrong  Scheme // with another secret
		empty  Scheme // with an empty secret
		rec    *Record
	}{
		{"GitHub", GitHub{Secret: "It's a Secret to Everybody"}, GitHub{Secret: "other"}, GitHub{},
			record("Hello, World!", receivedAt, "X-Hub-Signature-256", githubSig)},
		{"Stripe", Stripe{Secret: "whsec_stripe_test"}, Stripe{Secret: "whsec_other"}, Stripe{},
			record(stripeBody, receivedAt, "Stripe-Signature", "t=1700000000,v1="+stripeV1)},
		{"Stripe with several signatures", Stripe{Secret: "whsec_stripe_test"}, Stripe{Secret: "whsec_other"}, Stripe{},
			record(stripeBody, receivedAt, "Stripe-Signature", "t=1700000000,v1="+genericHex+",v0=00,v1="+stripeV1)},
		{"Standard Webhooks", StandardWebhooks{Secret: standardSecret}, StandardWebhooks{Secret: "whsec_b3RoZXI="}, StandardWebhooks{},
			record(standardBody, standardAt, "Webhook-Id", standardID, "Webhook-Timestamp", standardTS, "Webhook-Signature", standardSig)},
		{"Standard Webhooks with several signatures", StandardWebhooks{Secret: standardSecret}, StandardWebhooks{Secret: "whsec_b3RoZXI="}, StandardWebhooks{},
			record(standardBody, standardAt, "Webhook-Id", standardID, "Webhook-Timestamp", standardTS,
				"Webhook-Signature", "v1a,ignored v1,"+genericB64+" "+standardSig)},
		{"Svix", StandardWebhooks{Secret: standardSecret}, StandardWebhooks{Secret: "whsec_b3RoZXI="}, StandardWebhooks{Secret: "whsec_"},
			record(standardBody, standardAt, "Svix-Id", standardID, "Svix-Timestamp", standardTS, "Svix-Signature", standardSig)},
		{"Slack", Slack{Secret: slackSecret}, Slack{Secret: "other"}, Slack{},
			record(slackBody, slackAt, "X-Slack-Signature", slackSig, "X-Slack-Request-Timestamp", slackTS)},
		{"HMAC hex", HMAC{Secret: "generic-secret", Header: "X-Sig", Prefix: "sha256="}, HMAC{Secret: "other", Header: "X-Sig", Prefix: "sha256="}, HMAC{Header: "X-Sig"},
			record(`{"n":1}`, receivedAt, "X-Sig", "sha256="+genericHex)},
		{"HMAC base64", HMAC{Secret: "generic-secret", Header: "X-Sig", Encoding: Base64}, HMAC{Secret: "other", Header: "X-Sig", Encoding: Base64}, HMAC{Header: "X-Sig", Encoding: Base64},
			record(`{"n":1}`, receivedAt, "X-Sig", genericB64)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, tc.scheme.Verify(tc.rec))
			assert.ErrorIs(t, tc.wrong.Verify(tc.rec), ErrSignatureMismatch)
			assert.ErrorIs(t, tc.empty.Verify(tc.rec), ErrUnusableSecret)

			changed := *tc.rec
			changed.Body = append([]byte(nil), tc.rec.Body...)
			changed.Body[len(changed.Body)-1] ^= 1
			err := tc.scheme.Verify(&changed)
			assert.ErrorIs(t, err, ErrSignatureMismatch)
			assert.ErrorIs(t, err, ErrInvalidSignature)
		})
	}
}

// TestGitHubRawBytes is the bug of seed 003: a GitHub delivery must verify
// on the bytes received, whitespace and key order included, and would not
// on its JSON re-serialised.
func TestGitHubRawBytes(t *testing.T) {
	// KEY b"gh-secret", MESSAGE body, hex.
	const body = "{\n  \"zen\": \"Keep it logically awesome.\",\n  \"action\":  \"opened\" ,\n  \"hook_id\": 1\n}"
	const sig = "sha256=96db82c43ecdeccec6c9031fd2739c5455518a966be84aa2fe85406e85901844"
	scheme := GitHub{Secret: "gh-secret"}
	rec := record(body, receivedAt, "X-Hub-Signature-256", sig)
	require.NoError(t, scheme.Verify(rec))

	var payload map[string]any
	require.NoError(t, json.Unmarshal(rec.Body, &payload))
	reserialised, err := json.Marshal(payload)
	require.NoError(t, err)
	require.NotEqual(t, body, string(reserialised), "re-serialisation changes the bytes")
	rec.Body = reserialised
	assert.ErrorIs(t, scheme.Verify(rec), ErrSignatureMismatch)
}

// TestVerifyReasons checks that each way a signature fails has its own
// error, all wrapping ErrInvalidSignature.
func TestVerifyReasons(t *testing.T) {
	gh := GitHub{Secret: "It's a Secret to Everybody"}
	stripe := Stripe{Secret: "whsec_stripe_test"}
	std := StandardWebhooks{Secret: standardSecret}
	slack := Slack{Secret: slackSecret}
	generic := HMAC{Secret: "generic-secret", Header: "X-Sig", Prefix: "sha256="}
	stdHeaders := func(kv ...string) []string {
		return append([]string{"Webhook-Id", standardID, "Webhook-Timestamp", standardTS}, kv...)
	}
	at := time.Unix(1614265330, 0)
	for _, tc := range []struct {
		name   string
		scheme Scheme
		rec    *Record
		want   error
	}{
		{"GitHub without header", gh, record("Hello, World!", receivedAt), ErrMissingSignature},
		{"GitHub without sha256=", gh, record("Hello, World!", receivedAt, "X-Hub-Signature-256", githubSig[7:]), ErrMalformedSignature},
		{"GitHub not hex", gh, record("Hello, World!", receivedAt, "X-Hub-Signature-256", "sha256=zz"), ErrMalformedSignature},
		{"GitHub truncated", gh, record("Hello, World!", receivedAt, "X-Hub-Signature-256", githubSig[:41]), ErrSignatureMismatch},
		{"Stripe without header", stripe, record(stripeBody, receivedAt), ErrMissingSignature},
		{"Stripe without t", stripe, record(stripeBody, receivedAt, "Stripe-Signature", "v1="+stripeV1), ErrMalformedSignature},
		{"Stripe without v1", stripe, record(stripeBody, receivedAt, "Stripe-Signature", "t=1700000000,v0="+stripeV1), ErrMissingSignature},
		{"Stripe v1 not hex", stripe, record(stripeBody, receivedAt, "Stripe-Signature", "t=1700000000,v1=xyz"), ErrMalformedSignature},
		{"Stripe t not a number", stripe, record(stripeBody, receivedAt, "Stripe-Signature", "t=soon,v1="+stripeV1), ErrMalformedSignature},
		{"Standard without id", std, record(standardBody, at, "Webhook-Timestamp", standardTS, "Webhook-Signature", standardSig), ErrMissingSignature},
		{"Standard without signature", std, record(standardBody, at, stdHeaders()...), ErrMissingSignature},
		{"Standard without v1", std, record(standardBody, at, stdHeaders("Webhook-Signature", "v1a,"+standardSig[3:])...), ErrMissingSignature},
		{"Standard not base64", std, record(standardBody, at, stdHeaders("Webhook-Signature", "v1,***")...), ErrMalformedSignature},
		{"Standard secret not base64", StandardWebhooks{Secret: "whsec_***"}, record(standardBody, at, stdHeaders("Webhook-Signature", standardSig)...), ErrUnusableSecret},
		{"Slack without timestamp", slack, record(slackBody, receivedAt, "X-Slack-Signature", slackSig), ErrMissingSignature},
		{"Slack without v0=", slack, record(slackBody, receivedAt, "X-Slack-Signature", slackSig[3:], "X-Slack-Request-Timestamp", slackTS), ErrMalformedSignature},
		{"HMAC without header", generic, record(`{"n":1}`, receivedAt), ErrMissingSignature},
		{"HMAC without prefix", generic, record(`{"n":1}`, receivedAt, "X-Sig", genericHex), ErrMalformedSignature},
		{"HMAC not hex", generic, record(`{"n":1}`, receivedAt, "X-Sig", "sha256="+genericB64), ErrMalformedSignature},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.scheme.Verify(tc.rec)
			assert.ErrorIs(t, err, tc.want)
			assert.ErrorIs(t, err, ErrInvalidSignature)
		})
	}
}

// TestTolerance checks the edges of the timestamp tolerance, measured from
// the record's ReceivedAt in whole seconds, either way, for every scheme
// that signs a timestamp; a timestamp out of it fails even though the
// signature matches.
func TestTolerance(t *testing.T) {
	stripeAt := time.Unix(1_700_000_000, 0)
	standardAt := time.Unix(1614265330, 0)
	slackAt := time.Unix(1531420618, 0)
	for _, tc := range []struct {
		name      string
		scheme    Scheme
		rec       *Record
		signed    time.Time
		tolerance time.Duration
	}{
		{"Stripe", Stripe{Secret: "whsec_stripe_test"}, record(stripeBody, time.Time{}, "Stripe-Signature", "t=1700000000,v1="+stripeV1), stripeAt, DefaultTolerance},
		{"Stripe with its own tolerance", Stripe{Secret: "whsec_stripe_test", Tolerance: time.Minute}, record(stripeBody, time.Time{}, "Stripe-Signature", "t=1700000000,v1="+stripeV1), stripeAt, time.Minute},
		{"Standard Webhooks", StandardWebhooks{Secret: standardSecret}, record(standardBody, time.Time{}, "Webhook-Id", standardID, "Webhook-Timestamp", standardTS, "Webhook-Signature", standardSig), standardAt, DefaultTolerance},
		{"Slack", Slack{Secret: slackSecret}, record(slackBody, time.Time{}, "X-Slack-Signature", slackSig, "X-Slack-Request-Timestamp", slackTS), slackAt, DefaultTolerance},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, d := range []time.Duration{-tc.tolerance, tc.tolerance, tc.tolerance + 999*time.Millisecond} {
				tc.rec.ReceivedAt = tc.signed.Add(d)
				assert.NoError(t, tc.scheme.Verify(tc.rec), "received %s after signing", d)
			}
			for _, d := range []time.Duration{-tc.tolerance - time.Second, tc.tolerance + time.Second, 100 * 365 * 24 * time.Hour} {
				tc.rec.ReceivedAt = tc.signed.Add(d)
				err := tc.scheme.Verify(tc.rec)
				assert.ErrorIs(t, err, ErrTimestampOutOfTolerance, "received %s after signing", d)
				assert.ErrorIs(t, err, ErrInvalidSignature)
			}
		})
	}
}

// TestFarOffTimestamp checks that a timestamp too far off for a
// time.Duration still fails the tolerance, and that one that is not an
// int64 is malformed.
func TestFarOffTimestamp(t *testing.T) {
	rec := record("", receivedAt)
	for _, sec := range []int64{math.MaxInt64, math.MinInt64, 0} {
		assert.ErrorIs(t, checkTolerance(rec, sec, DefaultTolerance), ErrTimestampOutOfTolerance, sec)
	}
	for _, ts := range []string{"1e9", "9223372036854775808", "", " 1700000000"} {
		_, err := parseTimestamp("t", ts)
		assert.ErrorIs(t, err, ErrMalformedSignature, ts)
	}
}

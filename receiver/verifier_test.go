package receiver

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/streamhooks/webhooks/internal/webhooksig"
)

const testSecret = "whsec_0123456789abcdef"

var (
	testSignTime = time.Unix(1704067200, 0)
	testBody     = []byte(`{"consumer_id":"sub:%2Fa","epoch":7,"note":"héllo"}`)
)

// signStreamhooks is a spec 001 signature header, as the engine signs.
func signStreamhooks(secret string, at time.Time, body []byte) string {
	ts := strconv.FormatInt(at.Unix(), 10)
	return "t=" + ts + ",sha256=" + hex.EncodeToString(webhooksig.StreamhooksMAC(secret, ts, body))
}

// verifierAt is a Verifier of secrets whose clock reads now.
func verifierAt(t testing.TB, now time.Time, secrets ...string) *Verifier {
	t.Helper()
	opts := []Option{WithClock(func() time.Time { return now })}
	for _, s := range secrets {
		opts = append(opts, WithSecret(s))
	}
	v, err := NewVerifier(opts...)
	if err != nil {
		t.Fatalf("NewVerifier: %v", err)
	}
	return v
}

// verifyHeader verifies a spec 001 header alone.
func verifyHeader(v *Verifier, header string, body []byte) error {
	return v.Verify(context.Background(), http.Header{SignatureHeader: {header}}, body)
}

func TestSignatureKnownAnswer(t *testing.T) {
	// Computed independently:
	// printf '1704067200.%s' "$body" | openssl dgst -sha256 -hmac "$secret"
	const want = "t=1704067200,sha256=95c9a7f01d065fb7756902e611bb112a1aa5e191b5b3a0da1f619557c2feb71f"
	if got := signStreamhooks(testSecret, testSignTime, testBody); got != want {
		t.Fatalf("signature = %q, want %q", got, want)
	}
	if err := verifyHeader(verifierAt(t, testSignTime, testSecret), want, testBody); err != nil {
		t.Fatalf("Verify: %v", err)
	}
}

func TestVerifyRoundTrip(t *testing.T) {
	h := signStreamhooks(testSecret, testSignTime, testBody)
	if err := verifyHeader(verifierAt(t, testSignTime, testSecret), h, testBody); err != nil {
		t.Fatalf("Verify: %v", err)
	}
}

func TestNewVerifierRefuses(t *testing.T) {
	for name, opts := range map[string][]Option{
		"no secret":          nil,
		"empty secret":       {WithSecret("")},
		"negative tolerance": {WithSecret(testSecret), WithTolerance(-time.Second)},
		"nil clock":          {WithSecret(testSecret), WithClock(nil)},
	} {
		if v, err := NewVerifier(opts...); err == nil {
			t.Errorf("%s: NewVerifier = %v, want error", name, v)
		}
	}
}

func TestVerifyRejects(t *testing.T) {
	good := signStreamhooks(testSecret, testSignTime, testBody)
	hexSig := strings.TrimPrefix(good, "t=1704067200,sha256=")
	tests := []struct {
		name   string
		secret string
		header string
		body   []byte
		now    time.Time
	}{
		{"empty header", testSecret, "", testBody, testSignTime},
		{"no comma", testSecret, "t=1704067200", testBody, testSignTime},
		{"missing t", testSecret, "sha256=" + hexSig, testBody, testSignTime},
		{"parts swapped", testSecret, "sha256=" + hexSig + ",t=1704067200", testBody, testSignTime},
		{"empty t", testSecret, "t=,sha256=" + hexSig, testBody, testSignTime},
		{"negative t", testSecret, "t=-1704067200,sha256=" + hexSig, testBody, testSignTime},
		{"plus t", testSecret, "t=+1704067200,sha256=" + hexSig, testBody, testSignTime},
		{"fractional t", testSecret, "t=1704067200.0,sha256=" + hexSig, testBody, testSignTime},
		{"t overflows int64", testSecret, "t=99999999999999999999,sha256=" + hexSig, testBody, testSignTime},
		{"space after comma", testSecret, "t=1704067200, sha256=" + hexSig, testBody, testSignTime},
		{"other algorithm", testSecret, "t=1704067200,sha1=" + hexSig, testBody, testSignTime},
		{"uppercase hex", testSecret, "t=1704067200,sha256=" + strings.ToUpper(hexSig), testBody, testSignTime},
		{"short hex", testSecret, "t=1704067200,sha256=" + hexSig[:62], testBody, testSignTime},
		{"long hex", testSecret, good + "00", testBody, testSignTime},
		{"odd hex", testSecret, good + "0", testBody, testSignTime},
		{"non-hex", testSecret, "t=1704067200,sha256=" + strings.Repeat("zz", 32), testBody, testSignTime},
		{"trailing part", testSecret, good + ",v=1", testBody, testSignTime},
		{"trailing comma", testSecret, good + ",", testBody, testSignTime},
		{"empty entry", testSecret, strings.Replace(good, ",", ",,", 1), testBody, testSignTime},
		{"second entry malformed", testSecret, good + ",sha256=" + hexSig[:62], testBody, testSignTime},
		{"unknown key between entries", testSecret, strings.Replace(good, ",", ",v1=x,", 1), testBody, testSignTime},
		{"too many entries", testSecret, "t=1704067200" + strings.Repeat(",sha256="+strings.Repeat("0", 64), maxSignatures) + ",sha256=" + hexSig, testBody, testSignTime},
		{"no entry matches", testSecret, "t=1704067200,sha256=" + strings.Repeat("0", 64) + ",sha256=" + strings.Repeat("1", 64), testBody, testSignTime},
		{"tampered body", testSecret, good, append(bytes.Clone(testBody), ' '), testSignTime},
		{"wrong secret", "whsec_other", good, testBody, testSignTime},
		{"secret without prefix", strings.TrimPrefix(testSecret, "whsec_"), good, testBody, testSignTime},
		{"too old", testSecret, good, testBody, testSignTime.Add(DefaultTolerance + time.Second)},
		{"too new", testSecret, good, testBody, testSignTime.Add(-DefaultTolerance - time.Second)},
		{"signed at other time", testSecret, strings.Replace(good, "t=1704067200", "t=1704067201", 1), testBody, testSignTime},
		// Beyond ~292 years a time.Duration skew saturated and passed.
		{"centuries ahead", testSecret, signStreamhooks(testSecret, time.Unix(1<<40, 0), testBody), testBody, testSignTime},
		{"clock centuries behind", testSecret, good, testBody, time.Unix(-1<<40, 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := verifyHeader(verifierAt(t, tt.now, tt.secret), tt.header, tt.body)
			if !errors.Is(err, ErrInvalidSignature) {
				t.Fatalf("Verify = %v, want ErrInvalidSignature", err)
			}
		})
	}
}

func TestVerifyAnyEntry(t *testing.T) {
	good := signStreamhooks(testSecret, testSignTime, testBody)
	hexSig := strings.TrimPrefix(good, "t=1704067200,sha256=")
	other := "sha256=" + strings.Repeat("0", 64)
	for _, header := range []string{
		good + "," + other,
		"t=1704067200," + other + ",sha256=" + hexSig,
		"t=1704067200" + strings.Repeat(","+other, maxSignatures-1) + ",sha256=" + hexSig,
	} {
		if err := verifyHeader(verifierAt(t, testSignTime, testSecret), header, testBody); err != nil {
			t.Errorf("Verify(%q): %v", header, err)
		}
	}
}

func TestVerifyToleranceEdge(t *testing.T) {
	const tol = 30 * time.Second
	h := signStreamhooks(testSecret, testSignTime, testBody)
	tests := []struct {
		offset time.Duration
		ok     bool
	}{
		{-tol - time.Second, false},
		{-tol, true},
		{0, true},
		{tol, true},
		// Seconds are compared whole, as the reference verifier does.
		{tol + 999*time.Millisecond, true},
		{tol + time.Second, false},
	}
	for _, tt := range tests {
		now := testSignTime.Add(tt.offset)
		v, err := NewVerifier(WithSecret(testSecret), WithTolerance(tol), WithClock(func() time.Time { return now }))
		if err != nil {
			t.Fatal(err)
		}
		err = verifyHeader(v, h, testBody)
		if (err == nil) != tt.ok {
			t.Errorf("now = t%+v: err = %v, want ok = %v", tt.offset, err, tt.ok)
		}
	}
}

// TestVerifyEitherSecret is the receiver's side of a rotation: holding
// the new and the previous secret, it accepts a signature by either, and
// none by a third.
func TestVerifyEitherSecret(t *testing.T) {
	v := verifierAt(t, testSignTime, "whsec_new", "whsec_previous")
	for _, s := range []string{"whsec_new", "whsec_previous"} {
		if err := verifyHeader(v, signStreamhooks(s, testSignTime, testBody), testBody); err != nil {
			t.Errorf("signed with %s: %v", s, err)
		}
	}
	if err := verifyHeader(v, signStreamhooks("whsec_third", testSignTime, testBody), testBody); !errors.Is(err, ErrInvalidSignature) {
		t.Errorf("signed with a third secret: err = %v, want ErrInvalidSignature", err)
	}
}

package webhooks

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/streamhooks/webhooks/receiver"
)

const testSecret = "whsec_0123456789abcdef"

var (
	testSignTime = time.Unix(1704067200, 0)
	testBody     = []byte(`{"consumer_id":"sub:%2Fa","epoch":7,"note":"héllo"}`)
)

const (
	testPreviousSecret = "whsec_previous"
	// Standard Webhooks secrets: bytes 0..31 and 32..55 in base64.
	testStandardSecret         = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
	testStandardPreviousSecret = "whsec_ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3"
	testDeliveryID             = "wake_42"
)

// Known answers for testBody signed at testSignTime, computed in python3:
//
//	import hmac, hashlib, base64
//	body = b'{"consumer_id":"sub:%2Fa","epoch":7,"note":"h\xc3\xa9llo"}'
//	hex = lambda k: hmac.new(k, b"1704067200." + body, hashlib.sha256).hexdigest()
//	b64 = lambda k: base64.b64encode(hmac.new(k, b"wake_42.1704067200." + body, hashlib.sha256).digest())
//	hex(b"whsec_0123456789abcdef"), hex(b"whsec_previous")
//	b64(bytes(range(32))), b64(bytes(range(32, 56)))
const (
	kaHexNew = "95c9a7f01d065fb7756902e611bb112a1aa5e191b5b3a0da1f619557c2feb71f"
	kaHexOld = "be4fbe75b02183dfce0320188927ae6ecbc98c230e771477743919ce0226b3ad"
	kaB64New = "7DNN1l6f07IIx01edOL++VMPM9BlwWt115BawbxaoyE="
	kaB64Old = "VdqAxdPNnNx3V28L102OcmKTWNMFL+G1VFho6rAOxvs="
)

// rotated returns a subscription in scheme whose previous secret signs
// until expires.
func rotated(scheme SignatureScheme, expires time.Time) *Subscription {
	sub := &Subscription{Signature: scheme, Secret: testSecret, PreviousSecret: testPreviousSecret, PreviousSecretExpiresAt: expires}
	if scheme == SignatureStandard {
		sub.Secret, sub.PreviousSecret = testStandardSecret, testStandardPreviousSecret
	}
	return sub
}

func signed(t *testing.T, sub *Subscription, now time.Time) http.Header {
	t.Helper()
	h := http.Header{"Content-Type": {"application/json"}}
	if err := signDelivery(h, sub, testDeliveryID, now, testBody); err != nil {
		t.Fatalf("signDelivery: %v", err)
	}
	return h
}

func TestSigningHeaders(t *testing.T) {
	expires := testSignTime.Add(time.Hour)
	one := "t=1704067200,sha256=" + kaHexNew
	two := one + ",sha256=" + kaHexOld
	oneStd := "v1," + kaB64New
	twoStd := oneStd + " v1," + kaB64Old
	tests := []struct {
		name    string
		scheme  SignatureScheme
		expires time.Time
		want    string
	}{
		{"zero scheme, not rotated", "", time.Time{}, one},
		{"zero scheme, overlap", "", expires, two},
		{"streamhooks, not rotated", SignatureStreamhooks, time.Time{}, one},
		{"streamhooks, overlap", SignatureStreamhooks, expires, two},
		{"streamhooks, at expiry", SignatureStreamhooks, testSignTime, one},
		{"streamhooks, after expiry", SignatureStreamhooks, testSignTime.Add(-time.Nanosecond), one},
		{"streamhooks, last instant", SignatureStreamhooks, testSignTime.Add(time.Nanosecond), two},
		{"standard, not rotated", SignatureStandard, time.Time{}, oneStd},
		{"standard, overlap", SignatureStandard, expires, twoStd},
		{"standard, at expiry", SignatureStandard, testSignTime, oneStd},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := signed(t, rotated(tt.scheme, tt.expires), testSignTime)
			want := http.Header{
				"Content-Type":      {"application/json"},
				"Webhook-Id":        {testDeliveryID},
				"Webhook-Timestamp": {"1704067200"},
				"Webhook-Signature": {tt.want},
			}
			if len(h) != len(want) {
				t.Fatalf("headers = %q, want %q", h, want)
			}
			for k, v := range want {
				if got := h.Values(k); len(got) != 1 || got[0] != v[0] {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
		})
	}
}

func TestSigningNoPreviousSecret(t *testing.T) {
	sub := rotated(SignatureStreamhooks, testSignTime.Add(time.Hour))
	sub.PreviousSecret = ""
	if got, want := signed(t, sub, testSignTime).Get(receiver.SignatureHeader), "t=1704067200,sha256="+kaHexNew; got != want {
		t.Fatalf("signature = %q, want %q", got, want)
	}
}

// TestSigningRotation is the rotation rule for spec 001: a receiver holding
// either secret verifies during the overlap [rotation, expiry), and only
// the new one after it.
func TestSigningRotation(t *testing.T) {
	rotatedAt := testSignTime
	expires := rotatedAt.Add(24 * time.Hour)
	sub := rotated(SignatureStreamhooks, expires)
	for _, tt := range []struct {
		name  string
		at    time.Time
		oldOK bool
	}{
		{"at rotation", rotatedAt, true},
		{"during overlap", expires.Add(-time.Second), true},
		{"at expiry", expires, false},
		{"after expiry", expires.Add(time.Hour), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := signed(t, sub, tt.at)
			if err := receiverVerify(t, testSecret, h, tt.at); err != nil {
				t.Errorf("new secret: %v", err)
			}
			err := receiverVerify(t, testPreviousSecret, h, tt.at)
			if (err == nil) != tt.oldOK {
				t.Errorf("old secret: err = %v, want ok = %v", err, tt.oldOK)
			}
			if err := receiverVerify(t, "whsec_other", h, tt.at); err == nil {
				t.Error("a third secret verified")
			}
		})
	}
}

// TestStandardWebhooksLibrary checks our headers with the official Standard
// Webhooks library, at a fixed time with the check that skips the clock.
func TestStandardWebhooksLibrary(t *testing.T) {
	expires := testSignTime.Add(24 * time.Hour)
	sub := rotated(SignatureStandard, expires)
	for _, tt := range []struct {
		name  string
		at    time.Time
		oldOK bool
	}{
		{"during overlap", expires.Add(-time.Second), true},
		{"at expiry", expires, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := signed(t, sub, tt.at)
			if err := standardVerifier(t, testStandardSecret).VerifyIgnoringTimestamp(testBody, h); err != nil {
				t.Errorf("new secret: %v", err)
			}
			err := standardVerifier(t, testStandardPreviousSecret).VerifyIgnoringTimestamp(testBody, h)
			if (err == nil) != tt.oldOK {
				t.Errorf("old secret: err = %v, want ok = %v", err, tt.oldOK)
			}
			other := "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 32))
			if err := standardVerifier(t, other).VerifyIgnoringTimestamp(testBody, h); err == nil {
				t.Error("a third secret verified")
			}
			if err := standardVerifier(t, testStandardSecret).VerifyIgnoringTimestamp(append(bytes.Clone(testBody), ' '), h); err == nil {
				t.Error("a changed body verified")
			}
		})
	}
}

// TestStandardWebhooksLibraryClock runs the library's full check, which
// reads the real clock, so this test signs at the real time.
func TestStandardWebhooksLibraryClock(t *testing.T) {
	now := time.Now()
	sub := rotated(SignatureStandard, now.Add(time.Hour))
	h := signed(t, sub, now)
	for _, secret := range []string{testStandardSecret, testStandardPreviousSecret} {
		if err := standardVerifier(t, secret).Verify(testBody, h); err != nil {
			t.Errorf("Verify with %s: %v", secret, err)
		}
	}
}

func TestStandardWebhooksLibrarySign(t *testing.T) {
	want, err := standardVerifier(t, testStandardSecret).Sign(testDeliveryID, testSignTime, testBody)
	if err != nil {
		t.Fatal(err)
	}
	sub := &Subscription{Signature: SignatureStandard, Secret: testStandardSecret}
	if got := signed(t, sub, testSignTime).Get(receiver.SignatureHeader); got != want || got != "v1,"+kaB64New {
		t.Fatalf("signature = %q, library signs %q, known answer %q", got, want, "v1,"+kaB64New)
	}
}

// TestStandardWithStreamhooksSecret: a subscription that moves to Standard
// Webhooks keeps its hex secret, which is base64 too.
func TestStandardWithStreamhooksSecret(t *testing.T) {
	secret := newSecret(SignatureStreamhooks)
	h := signed(t, &Subscription{Signature: SignatureStandard, Secret: secret}, testSignTime)
	if err := standardVerifier(t, secret).VerifyIgnoringTimestamp(testBody, h); err != nil {
		t.Fatal(err)
	}
}

func TestSigningRejectsBadStandardSecret(t *testing.T) {
	for _, secret := range []string{
		"",
		testSecret, // 12 bytes
		strings.TrimPrefix(testStandardSecret, "whsec_"),
		"whsec_" + base64.StdEncoding.EncodeToString(make([]byte, minStandardKey-1)),
		"whsec_" + base64.StdEncoding.EncodeToString(make([]byte, maxStandardKey+1)),
		"whsec_" + base64.RawStdEncoding.EncodeToString(make([]byte, 32)),
		"whsec_" + base64.URLEncoding.EncodeToString([]byte(strings.Repeat("\xff", 32))),
	} {
		subs := []*Subscription{{Signature: SignatureStandard, Secret: secret}}
		if secret != "" { // an empty previous secret is no rotation
			subs = append(subs, &Subscription{Signature: SignatureStandard, Secret: testStandardSecret, PreviousSecret: secret, PreviousSecretExpiresAt: testSignTime.Add(time.Hour)})
		}
		for _, sub := range subs {
			h := http.Header{}
			err := signDelivery(h, sub, testDeliveryID, testSignTime, testBody)
			if !errors.Is(err, errStandardSecret) || len(h) != 0 {
				t.Errorf("secret %q, previous %q: err = %v, headers %q", sub.Secret, sub.PreviousSecret, err, h)
			}
		}
	}
	for _, n := range []int{minStandardKey, maxStandardKey} {
		secret := "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, n))
		signed(t, &Subscription{Signature: SignatureStandard, Secret: secret}, testSignTime)
	}
}

func TestSigningRejectsUnknownScheme(t *testing.T) {
	h := http.Header{}
	if err := signDelivery(h, &Subscription{Signature: "Standard", Secret: testStandardSecret}, testDeliveryID, testSignTime, testBody); err == nil || len(h) != 0 {
		t.Fatalf("err = %v, headers %q", err, h)
	}
}

func TestNewSecret(t *testing.T) {
	hexForm := regexp.MustCompile(`^whsec_[0-9a-f]{64}$`)
	for _, scheme := range []SignatureScheme{"", SignatureStreamhooks} {
		if s := newSecret(scheme); !hexForm.MatchString(s) {
			t.Errorf("newSecret(%q) = %q, want whsec_ and 64 hex digits", scheme, s)
		}
	}
	s := newSecret(SignatureStandard)
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
	if !strings.HasPrefix(s, "whsec_") || err != nil || len(key) != 32 {
		t.Fatalf("newSecret(standard) = %q, want whsec_ and 32 bytes in base64", s)
	}
	if newSecret(SignatureStandard) == s {
		t.Fatal("newSecret repeated itself")
	}
}

func standardVerifier(t *testing.T, secret string) *standardwebhooks.Webhook {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatalf("NewWebhook: %v", err)
	}
	return wh
}

// TestReferenceVerifierAcceptsSignature runs the RFC's TypeScript verifier
// on our signatures. It uses the real clock because the verifier does.
func TestReferenceVerifierAcceptsSignature(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("node is required in CI: ", err)
		}
		t.Skip("node not on PATH")
	}
	now := time.Now()
	// The verifier reads the first entry only, which signDelivery gives
	// the new secret during a rotation.
	rotated := http.Header{}
	sub := &Subscription{Secret: testSecret, PreviousSecret: testPreviousSecret, PreviousSecretExpiresAt: now.Add(time.Hour)}
	if err := signDelivery(rotated, sub, testDeliveryID, now, testBody); err != nil {
		t.Fatal(err)
	}
	run := func(header string, body []byte) (int, string) {
		t.Helper()
		cmd := exec.Command(node, "testdata/verify_signature.mjs", header, testSecret)
		cmd.Stdin = bytes.NewReader(body)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("running node: %v", err)
		}
		return cmd.ProcessState.ExitCode(), stderr.String()
	}
	plain := http.Header{}
	if err := signDelivery(plain, &Subscription{Secret: testSecret}, testDeliveryID, now, testBody); err != nil {
		t.Fatal(err)
	}
	for _, header := range []string{plain.Get(receiver.SignatureHeader), rotated.Get(receiver.SignatureHeader)} {
		if code, stderr := run(header, testBody); code != 0 {
			t.Fatalf("reference verifier rejected our signature %q: exit %d, stderr %q", header, code, stderr)
		}
		// A clean exit 1 is the verifier returning false, not a crash.
		if code, stderr := run(header, append(bytes.Clone(testBody), ' ')); code != 1 || stderr != "" {
			t.Fatalf("reference verifier on tampered body: exit %d, stderr %q; want exit 1", code, stderr)
		}
	}
}

// TestReceiverVerifiesEveryScheme: package receiver verifies what the
// engine signs in every scheme, alone and during a rotation with either
// secret. VerifySignature, before package receiver, refused the Standard
// Webhooks scheme ("missing t=").
func TestReceiverVerifiesEveryScheme(t *testing.T) {
	for _, scheme := range []SignatureScheme{"", SignatureStreamhooks, SignatureStandard} {
		for _, overlap := range []bool{false, true} {
			expires := time.Time{}
			if overlap {
				expires = testSignTime.Add(time.Hour)
			}
			sub := rotated(scheme, expires)
			h := signed(t, sub, testSignTime)
			if err := receiverVerify(t, sub.Secret, h, testSignTime); err != nil {
				t.Errorf("scheme %q, overlap %v: new secret: %v", scheme, overlap, err)
			}
			err := receiverVerify(t, sub.PreviousSecret, h, testSignTime)
			if (err == nil) != overlap {
				t.Errorf("scheme %q, overlap %v: previous secret: err = %v", scheme, overlap, err)
			}
			if err := receiverVerify(t, sub.Secret, h, testSignTime.Add(receiver.DefaultTolerance+time.Second)); err == nil {
				t.Errorf("scheme %q, overlap %v: verified after the tolerance", scheme, overlap)
			}
		}
	}
}

// receiverVerify verifies h, signing testBody, as a receiver holding
// secret does at now.
func receiverVerify(t *testing.T, secret string, h http.Header, now time.Time) error {
	t.Helper()
	v, err := receiver.NewVerifier(receiver.WithSecret(secret), receiver.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	return v.Verify(context.Background(), h, testBody)
}

func BenchmarkSignDelivery(b *testing.B) {
	sub := &Subscription{Secret: testSecret}
	h := http.Header{}
	b.ReportAllocs()
	for b.Loop() {
		if err := signDelivery(h, sub, testDeliveryID, testSignTime, testBody); err != nil {
			b.Fatal(err)
		}
	}
}

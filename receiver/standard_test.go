package receiver

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

const (
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

// standardHeader is the headers of a Standard Webhooks delivery.
func standardHeader(id, ts, sig string) http.Header {
	h := http.Header{}
	for k, v := range map[string]string{IDHeader: id, TimestampHeader: ts, SignatureHeader: sig} {
		if v != "" {
			h.Set(k, v)
		}
	}
	return h
}

// TestKnownAnswers verifies the python known answers of both schemes,
// each signature alone and as a rotation sends two, with either secret.
func TestKnownAnswers(t *testing.T) {
	tests := []struct {
		name             string
		header           http.Header
		newer, previous  string
		previousVerifies bool
	}{
		{"spec 001", http.Header{SignatureHeader: {"t=1704067200,sha256=" + kaHexNew}}, testSecret, "whsec_previous", false},
		{"spec 001 rotation", http.Header{SignatureHeader: {"t=1704067200,sha256=" + kaHexNew + ",sha256=" + kaHexOld}}, testSecret, "whsec_previous", true},
		{"standard", standardHeader(testDeliveryID, "1704067200", "v1,"+kaB64New), testStandardSecret, testStandardPreviousSecret, false},
		{"standard rotation", standardHeader(testDeliveryID, "1704067200", "v1,"+kaB64New+" v1,"+kaB64Old), testStandardSecret, testStandardPreviousSecret, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			if err := verifierAt(t, testSignTime, tt.newer).Verify(ctx, tt.header, testBody); err != nil {
				t.Errorf("new secret: %v", err)
			}
			err := verifierAt(t, testSignTime, tt.previous).Verify(ctx, tt.header, testBody)
			if (err == nil) != tt.previousVerifies {
				t.Errorf("previous secret: err = %v, want ok = %v", err, tt.previousVerifies)
			}
			if err := verifierAt(t, testSignTime, tt.previous, tt.newer).Verify(ctx, tt.header, testBody); err != nil {
				t.Errorf("both secrets: %v", err)
			}
			if err := verifierAt(t, testSignTime, tt.newer).Verify(ctx, tt.header, append(bytes.Clone(testBody), ' ')); !errors.Is(err, ErrInvalidSignature) {
				t.Errorf("changed body: err = %v, want ErrInvalidSignature", err)
			}
		})
	}
}

// TestStandardWebhooksLibrary verifies signatures made by the official
// Standard Webhooks library, and refuses them changed.
func TestStandardWebhooksLibrary(t *testing.T) {
	newer := standardSigner(t, testStandardSecret)
	previous := standardSigner(t, testStandardPreviousSecret)
	sig, err := newer.Sign(testDeliveryID, testSignTime, testBody)
	if err != nil {
		t.Fatal(err)
	}
	if sig != "v1,"+kaB64New {
		t.Fatalf("library signs %q, known answer %q", sig, "v1,"+kaB64New)
	}
	old, err := previous.Sign(testDeliveryID, testSignTime, testBody)
	if err != nil {
		t.Fatal(err)
	}
	v := verifierAt(t, testSignTime, testStandardSecret)
	ctx := context.Background()
	for _, header := range []string{sig, old + " " + sig, "v1a,AAAA " + sig} {
		if err := v.Verify(ctx, standardHeader(testDeliveryID, "1704067200", header), testBody); err != nil {
			t.Errorf("%q: %v", header, err)
		}
	}
	for name, h := range map[string]http.Header{
		"other id":         standardHeader("wake_43", "1704067200", sig),
		"other time":       standardHeader(testDeliveryID, "1704067201", sig),
		"previous only":    standardHeader(testDeliveryID, "1704067200", old),
		"no id":            standardHeader("", "1704067200", sig),
		"no timestamp":     standardHeader(testDeliveryID, "", sig),
		"signed timestamp": standardHeader(testDeliveryID, "t=1704067200", sig),
		"other version":    standardHeader(testDeliveryID, "1704067200", "v2,"+strings.TrimPrefix(sig, "v1,")),
		"unknown only":     standardHeader(testDeliveryID, "1704067200", "v1a,"+strings.TrimPrefix(sig, "v1,")),
		"comma list":       standardHeader(testDeliveryID, "1704067200", old+","+sig),
		"too many":         standardHeader(testDeliveryID, "1704067200", strings.Repeat(old+" ", maxSignatures)+sig),
		"too old":          standardHeader(testDeliveryID, "1704067000", sig),
	} {
		if err := v.Verify(ctx, h, testBody); !errors.Is(err, ErrInvalidSignature) {
			t.Errorf("%s: err = %v, want ErrInvalidSignature", name, err)
		}
	}
}

// TestStandardSecretPrefix: the key is the base64 after "whsec_", as the
// Standard Webhooks specification writes it; its libraries take the
// base64 without the prefix too, and so does Verify.
func TestStandardSecretPrefix(t *testing.T) {
	h := standardHeader(testDeliveryID, "1704067200", "v1,"+kaB64New)
	ctx := context.Background()
	bare := strings.TrimPrefix(testStandardSecret, "whsec_")
	for _, secret := range []string{testStandardSecret, bare} {
		if err := verifierAt(t, testSignTime, secret).Verify(ctx, h, testBody); err != nil {
			t.Errorf("secret %q: %v", secret, err)
		}
	}
	// The whole string, prefix included, is no Standard key: that is
	// spec 001's keying, and mistaking one for the other must not verify.
	raw := signRaw(t, []byte(testStandardSecret))
	if err := verifierAt(t, testSignTime, testStandardSecret).Verify(ctx, standardHeader(testDeliveryID, "1704067200", raw), testBody); !errors.Is(err, ErrInvalidSignature) {
		t.Errorf("keyed with the whole string: err = %v, want ErrInvalidSignature", err)
	}
	// A secret that is not base64 is no Standard key.
	err := verifierAt(t, testSignTime, "whsec_not base64!").Verify(ctx, h, testBody)
	if !errors.Is(err, ErrInvalidSignature) || !strings.Contains(err.Error(), "base64") {
		t.Errorf("non-base64 secret: err = %v", err)
	}
}

// signRaw signs the test delivery with key as the Standard HMAC key.
func signRaw(t *testing.T, key []byte) string {
	t.Helper()
	wh, err := standardwebhooks.NewWebhookRaw(key)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := wh.Sign(testDeliveryID, testSignTime, testBody)
	if err != nil {
		t.Fatal(err)
	}
	return sig
}

// TestStandardWithStreamhooksSecret: a subscription that moved to
// Standard Webhooks keeps its spec 001 hex secret, which is base64 too.
func TestStandardWithStreamhooksSecret(t *testing.T) {
	secret := "whsec_" + strings.Repeat("0123456789abcdef", 4)
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		t.Fatal(err)
	}
	h := standardHeader(testDeliveryID, "1704067200", signRaw(t, key))
	if err := verifierAt(t, testSignTime, secret).Verify(context.Background(), h, testBody); err != nil {
		t.Fatal(err)
	}
}

// TestStandardWebhooksLibraryClock signs at the real time, as the library
// does, for a Verifier on its default clock.
func TestStandardWebhooksLibraryClock(t *testing.T) {
	now := time.Now()
	sig, err := standardSigner(t, testStandardSecret).Sign(testDeliveryID, now, testBody)
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewVerifier(WithSecret(testStandardSecret))
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set(IDHeader, testDeliveryID)
	h.Set(TimestampHeader, strconv.FormatInt(now.Unix(), 10))
	h.Set(SignatureHeader, sig)
	if err := v.Verify(context.Background(), h, testBody); err != nil {
		t.Fatal(err)
	}
}

func standardSigner(t *testing.T, secret string) *standardwebhooks.Webhook {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatalf("NewWebhook: %v", err)
	}
	return wh
}

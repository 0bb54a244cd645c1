package webhooks

import (
	"bytes"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

const testSecret = "whsec_0123456789abcdef"

var (
	testSignTime = time.Unix(1704067200, 0)
	testBody     = []byte(`{"consumer_id":"sub:%2Fa","epoch":7,"note":"héllo"}`)
)

func TestSignPayloadKnownAnswer(t *testing.T) {
	// Computed independently:
	// printf '1704067200.%s' "$body" | openssl dgst -sha256 -hmac "$secret"
	const want = "t=1704067200,sha256=95c9a7f01d065fb7756902e611bb112a1aa5e191b5b3a0da1f619557c2feb71f"
	if got := SignPayload(testSecret, testSignTime, testBody); got != want {
		t.Fatalf("SignPayload = %q, want %q", got, want)
	}
}

func TestVerifySignatureRoundTrip(t *testing.T) {
	h := SignPayload(testSecret, testSignTime, testBody)
	if err := VerifySignature(testSecret, h, testBody, testSignTime, DefaultSignatureTolerance); err != nil {
		t.Fatalf("VerifySignature: %v", err)
	}
}

func TestVerifySignatureRejects(t *testing.T) {
	good := SignPayload(testSecret, testSignTime, testBody)
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
		{"empty secret", "", SignPayload("", testSignTime, testBody), testBody, testSignTime},
		{"too old", testSecret, good, testBody, testSignTime.Add(DefaultSignatureTolerance + time.Second)},
		{"too new", testSecret, good, testBody, testSignTime.Add(-DefaultSignatureTolerance - time.Second)},
		{"signed at other time", testSecret, strings.Replace(good, "t=1704067200", "t=1704067201", 1), testBody, testSignTime},
		// Beyond ~292 years a time.Duration skew saturated and passed.
		{"centuries ahead", testSecret, SignPayload(testSecret, time.Unix(1<<40, 0), testBody), testBody, testSignTime},
		{"clock centuries behind", testSecret, good, testBody, time.Unix(-1<<40, 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := VerifySignature(tt.secret, tt.header, tt.body, tt.now, DefaultSignatureTolerance)
			if !errors.Is(err, ErrInvalidSignature) {
				t.Fatalf("VerifySignature = %v, want ErrInvalidSignature", err)
			}
		})
	}
}

func TestVerifySignatureAnyEntry(t *testing.T) {
	good := SignPayload(testSecret, testSignTime, testBody)
	hexSig := strings.TrimPrefix(good, "t=1704067200,sha256=")
	other := "sha256=" + strings.Repeat("0", 64)
	for _, header := range []string{
		good + "," + other,
		"t=1704067200," + other + ",sha256=" + hexSig,
		"t=1704067200" + strings.Repeat(","+other, maxSignatures-1) + ",sha256=" + hexSig,
	} {
		if err := VerifySignature(testSecret, header, testBody, testSignTime, DefaultSignatureTolerance); err != nil {
			t.Errorf("VerifySignature(%q): %v", header, err)
		}
	}
}

func TestVerifySignatureToleranceEdge(t *testing.T) {
	const tol = 30 * time.Second
	h := SignPayload(testSecret, testSignTime, testBody)
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
		err := VerifySignature(testSecret, h, testBody, testSignTime.Add(tt.offset), tol)
		if (err == nil) != tt.ok {
			t.Errorf("now = t%+v: err = %v, want ok = %v", tt.offset, err, tt.ok)
		}
	}
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
	for _, header := range []string{SignPayload(testSecret, now, testBody), rotated.Get(SignatureHeader)} {
		if code, stderr := run(header, testBody); code != 0 {
			t.Fatalf("reference verifier rejected our signature %q: exit %d, stderr %q", header, code, stderr)
		}
		// A clean exit 1 is the verifier returning false, not a crash.
		if code, stderr := run(header, append(bytes.Clone(testBody), ' ')); code != 1 || stderr != "" {
			t.Fatalf("reference verifier on tampered body: exit %d, stderr %q; want exit 1", code, stderr)
		}
	}
}

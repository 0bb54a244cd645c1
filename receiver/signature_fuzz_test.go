package receiver

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sigFuzzHeader is the only header shape a verifier may accept: a time
// and one to eight MACs.
var sigFuzzHeader = regexp.MustCompile(`^t=([0-9]+)((?:,sha256=[0-9a-f]{64}){1,8})$`)

// FuzzSignature checks Verify against spec 001 signatures as the engine
// makes them. An arbitrary header is accepted only if it is well formed,
// within tolerance and one of its entries is the HMAC of the body under
// the secret; a signed header is accepted exactly when its time is within
// tolerance, alone or beside another secret's entry, as a rotation sends
// it; and no single byte change to the header, a change to the body or
// another secret is accepted.
func FuzzSignature(f *testing.F) {
	good := signStreamhooks(testSecret, testSignTime, testBody)
	sign := testSignTime.Unix()
	tol := int64(DefaultTolerance)
	f.Add(testSecret, good, testBody, sign, int64(0), uint8(0), int64(0), tol, uint16(0), byte(1))
	f.Add(testSecret, good, testBody, sign+300, int64(-300), uint8(0), int64(999_999_999), tol, uint16(len(good)-1), byte(1))
	f.Add(testSecret, good, testBody, sign-301, int64(301), uint8(0), int64(0), tol, uint16(3), byte('0'^'1'))
	f.Add(testSecret, good, []byte{}, sign+1, int64(-1), uint8(0), int64(0), int64(time.Second)-1, uint16(20), byte(0x20))
	// 2^40 s ahead, past what a time.Duration holds.
	f.Add(testSecret, good, testBody, sign, int64(1), uint8(40), int64(0), tol, uint16(9), byte(2))
	f.Add("", good, testBody, sign, int64(0), uint8(0), int64(0), tol, uint16(0), byte(0))
	// The timestamp is signed as written, leading zeros and all.
	f.Add(testSecret, "t=01704067200,sha256="+sigFuzzMAC(testSecret, "01704067200", testBody), testBody, sign, int64(0), uint8(0), int64(0), tol, uint16(2), byte(1))
	f.Add("whsec_x", "t=0001704067200,sha256="+good[len(good)-64:], testBody, sign, int64(-1), uint8(63), int64(0), int64(-1), uint16(0), byte(0))
	f.Add("whsec_x", "t=99999999999999999999,sha256=00", []byte("{}"), sign, int64(-1), uint8(1), int64(0), tol, uint16(12), byte(0x80))
	f.Add(testSecret, good+",sha256="+sigFuzzMAC("whsec_old", "1704067200", testBody), testBody, sign, int64(0), uint8(0), int64(0), tol, uint16(70), byte(1))
	f.Add(testSecret, "t=1704067200"+strings.Repeat(",sha256="+good[len(good)-64:], 9), testBody, sign, int64(0), uint8(0), int64(0), tol, uint16(0), byte(1))
	// The signing time is now + skew<<shift: the mutator moves integers by
	// at most 100, and a shift reaches the far ends of int64.
	f.Fuzz(func(t *testing.T, secret, header string, body []byte, nowSec, skew int64, shift uint8, nowNsec, tolerance int64, pos uint16, xor byte) {
		signSec := nowSec + skew<<(shift%64)
		now := time.Unix(nowSec, nowNsec%int64(time.Second))
		tol := time.Duration(tolerance)
		verify := func(header string, body []byte) error {
			t.Helper()
			err := fuzzVerify(secret, header, body, now, tol)
			if err != nil && !errors.Is(err, ErrInvalidSignature) {
				t.Fatalf("error %v does not wrap ErrInvalidSignature", err)
			}
			return err
		}

		if verify(header, body) == nil {
			m := sigFuzzHeader.FindStringSubmatch(header)
			if secret == "" || m == nil {
				t.Fatalf("accepted header %q with secret %q", header, secret)
			}
			ts, err := strconv.ParseInt(m[1], 10, 64)
			if err != nil || !sigFuzzWithin(now.Unix(), ts, tol) {
				t.Fatalf("accepted header %q at %d with tolerance %v", header, now.Unix(), tol)
			}
			if !strings.Contains(m[2]+",", ",sha256="+sigFuzzMAC(secret, m[1], body)+",") {
				t.Fatalf("accepted header %q with no MAC of this body and secret", header)
			}
		}

		signed := signStreamhooks(secret, time.Unix(signSec, 0), body)
		want := secret != "" && signSec >= 0 && sigFuzzWithin(now.Unix(), signSec, tol)
		if err := verify(signed, body); (err == nil) != want {
			t.Fatalf("header %q at %d with tolerance %v: got %v, want accepted=%v", signed, now.Unix(), tol, err, want)
		}
		old := secret + "old"
		rotated := signed + ",sha256=" + sigFuzzMAC(old, strings.TrimPrefix(signed[:strings.IndexByte(signed, ',')], "t="), body)
		if err := verify(rotated, body); (err == nil) != want {
			t.Fatalf("rotated header %q: got %v, want accepted=%v", rotated, err, want)
		}
		wantOld := signSec >= 0 && sigFuzzWithin(now.Unix(), signSec, tol)
		if err := fuzzVerify(old, rotated, body, now, tol); (err == nil) != wantOld {
			t.Fatalf("rotated header %q under the old secret: got %v, want accepted=%v", rotated, err, wantOld)
		}
		if xor == 0 {
			xor = 1
		}
		b := []byte(signed)
		b[int(pos)%len(b)] ^= xor
		if err := verify(string(b), body); err == nil {
			t.Fatalf("accepted %q, a mutation of %q", b, signed)
		}
		if err := verify(signed, append(body[:len(body):len(body)], xor)); err == nil {
			t.Fatalf("accepted %q for a longer body", signed)
		}
		if len(body) > 0 {
			other := append([]byte(nil), body...)
			other[int(pos)%len(other)] ^= xor
			if err := verify(signed, other); err == nil {
				t.Fatalf("accepted %q for a changed body", signed)
			}
		}
		if err := fuzzVerify(secret+"x", signed, body, now, tol); err == nil {
			t.Fatalf("accepted %q under another secret", signed)
		}
	})
}

// sigFuzzWithin reports whether |now-ts| seconds is at most tolerance, in
// exact arithmetic.
func sigFuzzWithin(now, ts int64, tolerance time.Duration) bool {
	d := new(big.Int).Sub(big.NewInt(now), big.NewInt(ts))
	d.Abs(d).Mul(d, big.NewInt(int64(time.Second)))
	return d.Cmp(big.NewInt(int64(tolerance))) <= 0
}

// sigFuzzMAC is HMAC-SHA256(secret, ts + "." + body) in lowercase hex.
func sigFuzzMAC(secret, ts string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "."))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// fuzzVerify verifies header with a Verifier of secret and tolerance whose
// clock reads now. A secret or tolerance NewVerifier refuses verifies
// nothing.
func fuzzVerify(secret, header string, body []byte, now time.Time, tolerance time.Duration) error {
	v, err := NewVerifier(WithSecret(secret), WithTolerance(tolerance), WithClock(func() time.Time { return now }))
	if err != nil {
		return invalid("%v", err)
	}
	return verifyHeader(v, header, body)
}

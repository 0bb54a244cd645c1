package receiver

import (
	"crypto/hmac"
	"encoding/base64"
	"strings"

	"github.com/streamhooks/webhooks/internal/webhooksig"
)

// verifyStandard checks a Standard Webhooks signature: a space-separated
// list of "<version>,<base64>" entries, of which it reads the "v1" ones,
// the HMAC-SHA256 of "<id>.<timestamp>.<body>" under the secret's base64
// key. Entries of other versions are skipped, as the specification asks.
func (v *Verifier) verifyStandard(id, ts, header string, body []byte) error {
	if id == "" || ts == "" {
		return invalid("malformed header: Standard Webhooks needs %s and %s", IDHeader, TimestampHeader)
	}
	if err := v.checkTime(ts); err != nil {
		return err
	}
	entries := strings.Split(header, " ")
	if len(entries) > maxSignatures {
		return invalid("malformed header: too many signatures")
	}
	var sigs []string
	for _, e := range entries {
		if sig, ok := strings.CutPrefix(e, "v1,"); ok {
			sigs = append(sigs, sig)
		}
	}
	if len(sigs) == 0 {
		return invalid("malformed header: no t=<unix> and no v1,<base64> signature")
	}
	keyed := false
	for _, s := range v.secrets {
		if s.standard == nil {
			continue
		}
		keyed = true
		want := base64.StdEncoding.EncodeToString(webhooksig.StandardMAC(s.standard, id, ts, body))
		for _, sig := range sigs {
			if hmac.Equal([]byte(sig), []byte(want)) {
				return nil
			}
		}
	}
	if !keyed {
		return invalid("no secret is base64 after %q, as Standard Webhooks keys are", webhooksig.SecretPrefix)
	}
	return invalid("signature mismatch")
}

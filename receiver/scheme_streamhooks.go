package receiver

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/streamhooks/webhooks/internal/webhooksig"
)

// verifyStreamhooks checks a spec 001 header: "t=<unix>" and one to eight
// ",sha256=<64 lowercase hex>" entries; anything else, such as another key
// or a space, is malformed. It verifies if any entry is the MAC of any
// secret, keyed with the whole secret string.
func (v *Verifier) verifyStreamhooks(header string, body []byte) error {
	ts, sigs, err := parseStreamhooksHeader(header)
	if err != nil {
		return err
	}
	if err := v.checkTime(ts); err != nil {
		return err
	}
	// The timestamp is signed as written, as the reference verifier does.
	for _, s := range v.secrets {
		want := webhooksig.StreamhooksMAC(s.raw, ts, body)
		for _, sig := range sigs {
			if hmac.Equal(sig, want) {
				return nil
			}
		}
	}
	return invalid("signature mismatch")
}

// parseStreamhooksHeader splits "t=<ts>" and its ",sha256=<64 lowercase
// hex>" entries into the timestamp as written and the decoded MACs.
func parseStreamhooksHeader(header string) (ts string, sigs [][]byte, err error) {
	tPart, rest, ok := strings.Cut(header, ",")
	if !ok {
		return "", nil, invalid("malformed header: want t=<unix>,sha256=<hex>")
	}
	ts = strings.TrimPrefix(tPart, "t=")
	for part := range strings.SplitSeq(rest, ",") {
		if len(sigs) == maxSignatures {
			return "", nil, invalid("malformed header: too many signatures")
		}
		hexSig, ok := strings.CutPrefix(part, "sha256=")
		if !ok {
			return "", nil, invalid("malformed header: missing sha256=")
		}
		sig, err := hex.DecodeString(hexSig)
		if err != nil || len(sig) != sha256.Size || hexSig != strings.ToLower(hexSig) {
			return "", nil, invalid("malformed header: signature is not 64 lowercase hex digits")
		}
		sigs = append(sigs, sig)
	}
	return ts, sigs, nil
}

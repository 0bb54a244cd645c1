package receiver

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"
)

// Endpoint verification: the engine POSTs a subscription created pending
// a signed Challenge, with its challenge in ChallengeHeader too, and
// activates the subscription once the endpoint answers 2xx with a
// ChallengeResponse that echoes it.
const (
	// ChallengeType is the type of a Challenge.
	ChallengeType = "webhook.verification"
	// ChallengeHeader carries the challenge of a Challenge, so that a
	// receiver can tell one from a delivery before reading the body.
	ChallengeHeader = "Webhook-Challenge"
	// MaxChallengeBytes bounds the body AnswerChallenge reads.
	MaxChallengeBytes = 4 << 10
)

// Challenge is the body of a verification challenge.
type Challenge struct {
	Type           string    `json:"type"`
	SubscriptionID string    `json:"subscription_id"`
	DeliveryID     string    `json:"delivery_id"`
	Challenge      string    `json:"challenge"`
	SentAt         time.Time `json:"sent_at"`
}

// ChallengeResponse is the answer that verifies an endpoint: the
// challenge, echoed, in a 2xx response's JSON body.
type ChallengeResponse struct {
	Challenge string `json:"challenge"`
}

// AnswerChallenge answers r if it is a verification challenge: it verifies
// its signature, as ParseEvents does, and answers 200 with the challenge
// echoed. It reports whether it answered. A request without
// ChallengeHeader is no challenge: it returns false and a nil error, and
// leaves w and r's body alone for the handler's usual path. A challenge
// that fails verification returns an error to answer as ParseEvents's
// errors are, and w untouched.
func (v *Verifier) AnswerChallenge(w http.ResponseWriter, r *http.Request) (bool, error) {
	header := r.Header.Get(ChallengeHeader)
	if header == "" {
		return false, nil
	}
	var c Challenge
	if err := v.parse(r, MaxChallengeBytes, &c); err != nil {
		return false, err
	}
	if c.Type != ChallengeType || c.Challenge == "" || c.Challenge != header {
		return false, errors.New("receiver: malformed verification challenge")
	}
	body, err := json.Marshal(ChallengeResponse{Challenge: c.Challenge})
	if err != nil {
		return false, err
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
	return true, nil
}

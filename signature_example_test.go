package webhooks_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/streamhooks/webhooks"
)

func ExampleVerifySignature() {
	secret := "whsec_example"
	body := []byte(`{"consumer_id":"my-sub:%2Fagents%2Ftask-123","epoch":7}`)
	signedAt := time.Unix(1704067200, 0)
	header := webhooks.SignPayload(secret, signedAt, body)
	fmt.Println(header)

	// A handler passes the raw body, the header and its clock.
	now := signedAt.Add(time.Minute)
	err := webhooks.VerifySignature(secret, header, body, now, webhooks.DefaultSignatureTolerance)
	fmt.Println("fresh:", err)

	err = webhooks.VerifySignature(secret, header, body, now.Add(time.Hour), webhooks.DefaultSignatureTolerance)
	fmt.Println("replayed:", errors.Is(err, webhooks.ErrInvalidSignature), err)
	// Output:
	// t=1704067200,sha256=562fb20c0d291a175e2d86468c3c9d4db81fd5a033670e1be095075e381e2b0b
	// fresh: <nil>
	// replayed: true webhooks: invalid webhook signature: timestamp too old
}

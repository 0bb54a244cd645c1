package inbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/streamhooks/webhooks/inbox"
)

// Mount one Handler for every provider under /inbox/; each delivery is
// appended to its provider's stream before it is answered. A processor
// later reads the records and verifies each with the provider's Scheme.
func ExampleNew() {
	github := inbox.Provider{Name: "github", Scheme: inbox.GitHub{Secret: "It's a Secret to Everybody"}}
	var stored []byte // the host's streams; here, one record in memory
	appender := inbox.AppenderFunc(func(_ context.Context, stream string, record []byte) error {
		fmt.Println("appended to", stream)
		stored = record
		return nil
	})
	h, err := inbox.New(appender, []inbox.Provider{github})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /inbox/", h)

	req := httptest.NewRequest(http.MethodPost, "/inbox/github", strings.NewReader("Hello, World!"))
	req.Header.Set("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
	req.Header.Set("X-Hub-Signature-256", "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, req)
	fmt.Println(w.Code)

	// Processing, later:
	var rec inbox.Record
	if err := json.Unmarshal(stored, &rec); err != nil {
		log.Fatal(err)
	}
	fmt.Println(rec.Provider, rec.DeliveryID, github.Scheme.Verify(&rec))
	// Output:
	// appended to /inbox/github/records
	// 202
	// github 72d3162e-cc78-11e3-81ab-4c9367dc0958 <nil>
}

// Command streamhooks manages the webhook engine of a host that mounts its
// handlers, such as examples/streamserver, through its subscription API:
//
//	go install github.com/streamhooks/webhooks/cmd/streamhooks@latest
//	export STREAMHOOKS_URL=http://127.0.0.1:8787 STREAMHOOKS_API_TOKEN=...
//	streamhooks subscriptions list
//	streamhooks dead orders
//	streamhooks revive orders 'orders:%2Forders%2F1'
//
// Output is a table, or JSON with -o json. An error the API answers is
// printed with its code and message, and the exit status is 1; a usage
// error exits with 2. Run streamhooks -h for the commands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// Environment variables that stand in for --url and --token.
const (
	urlEnv   = "STREAMHOOKS_URL"
	tokenEnv = "STREAMHOOKS_API_TOKEN"
)

// usage lists the commands.
const usage = `streamhooks [--url URL] [--token TOKEN] [-o table|json] COMMAND ...

Commands:
  subscriptions list [--pattern P]
  subscriptions get ID
  subscriptions create ID --pattern P (--webhook URL [--events] [--verify] [--description D] | --file FILE.json)
  subscriptions update ID [--webhook URL] [--description D] [--file FILE.json]
  subscriptions pause ID
  subscriptions resume ID
  subscriptions verify ID      (a pending subscription: verify it by hand)
  subscriptions challenge ID   (a pending subscription: challenge its endpoint again)
  subscriptions delete ID
  consumers SUB [--state IDLE|WAKING|LIVE|FAILED] [--limit N] [--cursor C]
  deliveries SUB CONSUMER
  rewind SUB (--offset OFFSET | --time RFC3339) [--consumer CONSUMER]
  dead SUB [--limit N] [--cursor C]
  revive SUB CONSUMER
  test SUB
  rotate SUB [--overlap DURATION]
  verify --secret SECRET [--max-age DURATION] REQUEST_FILE

--url and --token default to $STREAMHOOKS_URL and $STREAMHOOKS_API_TOKEN.
A subscription is found by its ID under --pattern (default /**).
verify checks the signature of a webhook request saved as raw HTTP
(headers, blank line, body), in either scheme (spec 001 or Standard
Webhooks), with the whole webhook_secret the API returned.
`

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr, os.Getenv, time.Now))
}

// errUsage is a command line the CLI does not understand.
var errUsage = errors.New("usage")

// run runs the command line args and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string, now func() time.Time) int {
	fs := flag.NewFlagSet("streamhooks", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	base := fs.String("url", getenv(urlEnv), "base URL of the host [$"+urlEnv+"]")
	token := fs.String("token", getenv(tokenEnv), "API token [$"+tokenEnv+"]")
	format := fs.String("o", "table", "output: table or json")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *format != "table" && *format != "json" {
		fmt.Fprintf(stderr, "streamhooks: -o %q: want table or json\n", *format)
		return 2
	}
	c := &cli{api: &client{base: strings.TrimRight(*base, "/"), token: *token, hc: http.Client{Transport: transport}}, out: stdout, json: *format == "json", now: now}
	err := c.dispatch(ctx, fs.Args())
	var apiErr *apiError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "streamhooks: %v\n\n%s", err, usage)
		return 2
	case errors.As(err, &apiErr):
		fmt.Fprintf(stderr, "streamhooks: %s: %s (HTTP %d)\n", apiErr.Code, apiErr.Message, apiErr.Status)
		return 1
	default:
		fmt.Fprintf(stderr, "streamhooks: %v\n", err)
		return 1
	}
}

// usageError is errUsage with what was wrong.
func usageError(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, a...))
}

package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"time"
)

// cli runs one command against api and prints its result to out.
type cli struct {
	api  *client
	out  io.Writer
	json bool
	now  func() time.Time
}

// object is a JSON object the API answered.
type object = map[string]any

// dispatch runs the command args names.
func (c *cli) dispatch(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usageError("no command")
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "subscriptions", "subscription", "subs":
		return c.subscriptions(ctx, args)
	case "consumers":
		return c.consumers(ctx, args, false)
	case "dead":
		return c.consumers(ctx, args, true)
	case "deliveries":
		return c.deliveries(ctx, args)
	case "rewind":
		return c.rewind(ctx, args)
	case "revive":
		return c.revive(ctx, args)
	case "test":
		return c.test(ctx, args)
	case "rotate":
		return c.rotate(ctx, args)
	case "verify":
		return c.verify(ctx, args)
	}
	return usageError("unknown command %q", cmd)
}

// flags parses args with fs, and returns the positional arguments, which
// must number want; flags may come before or after them.
func flags(fs *flag.FlagSet, args []string, want int) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, usageError("%s: %v", fs.Name(), err)
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos, args = append(pos, args[0]), args[1:]
	}
	if len(pos) != want {
		return nil, usageError("%s takes %d argument(s), got %d", fs.Name(), want, len(pos))
	}
	return pos, nil
}

// on returns the query that names subscription id, and op if set.
func on(id string, op ...string) url.Values {
	q := url.Values{"subscription": {id}}
	for _, o := range op {
		q.Set(o, "")
	}
	return q
}

func (c *cli) subscriptions(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usageError("subscriptions: want list, get, create, update, pause, resume, verify, challenge or delete")
	}
	verb, args := args[0], args[1:]
	fs := flag.NewFlagSet("subscriptions "+verb, flag.ContinueOnError)
	pattern := fs.String("pattern", "/**", "pattern the subscription is found under, or created with")
	switch verb {
	case "list":
		if _, err := flags(fs, args, 0); err != nil {
			return err
		}
		var out struct {
			Subscriptions []object `json:"subscriptions"`
		}
		if err := c.api.do(ctx, http.MethodGet, *pattern, url.Values{"subscriptions": {""}}, nil, &out); err != nil {
			return err
		}
		return c.print(out, subscriptionColumns, out.Subscriptions...)
	case "get", "delete", "pause", "resume", "verify", "challenge":
		pos, err := flags(fs, args, 1)
		if err != nil {
			return err
		}
		method, body, query := map[string]string{"get": http.MethodGet, "delete": http.MethodDelete}[verb], any(nil), on(pos[0])
		switch verb {
		case "pause", "resume":
			method, body = http.MethodPatch, object{"status": map[string]string{"pause": "paused", "resume": "active"}[verb]}
		case "verify", "challenge": // a pending subscription's endpoint verification
			method, query = http.MethodPost, on(pos[0], verb)
		}
		var out object
		if err := c.api.do(ctx, method, *pattern, query, body, &out); err != nil {
			return err
		}
		if out == nil {
			return c.done("deleted subscription " + pos[0])
		}
		return c.print(out, subscriptionColumns, out)
	case "create", "update":
		webhook := fs.String("webhook", "", "webhook URL")
		description := fs.String("description", "", "description")
		events := fs.Bool("events", false, "event push: POST batches of events rather than wake-ups")
		verify := fs.Bool("verify", false, "create it pending until its endpoint is verified")
		file := fs.String("file", "", "JSON file with the request body; flags given override its fields")
		pos, err := flags(fs, args, 1)
		if err != nil {
			return err
		}
		body := object{}
		if *file != "" {
			data, err := os.ReadFile(*file)
			if err != nil {
				return err
			}
			if err := json.Unmarshal(data, &body); err != nil {
				return fmt.Errorf("%s: %w", *file, err)
			}
		}
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "webhook":
				body["webhook"] = *webhook
			case "description":
				body["description"] = *description
			case "events":
				if *events {
					body["delivery"] = "events"
				}
			case "verify":
				if *verify {
					body["verify"] = true
				}
			}
		})
		method := http.MethodPatch
		if verb == "create" {
			method = http.MethodPut
			if *pattern == "/**" && !isSet(fs, "pattern") {
				return usageError("subscriptions create needs --pattern")
			}
		}
		var out object
		if err := c.api.do(ctx, method, *pattern, on(pos[0]), body, &out); err != nil {
			return err
		}
		return c.print(out, append(subscriptionColumns, column{"SECRET", "webhook_secret"}), out)
	}
	return usageError("subscriptions: unknown %q", verb)
}

func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func (c *cli) consumers(ctx context.Context, args []string, dead bool) error {
	name := "consumers"
	if dead {
		name = "dead"
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	pattern := fs.String("pattern", "/**", "pattern the subscription is found under")
	state := fs.String("state", "", "only consumers in this state: IDLE, WAKING, LIVE or FAILED")
	limit := fs.Int("limit", 0, "consumers per page (default the API's)")
	cursor := fs.String("cursor", "", "next_cursor of the previous page")
	pos, err := flags(fs, args, 1)
	if err != nil {
		return err
	}
	q := on(pos[0], name)
	if *state != "" && !dead {
		q.Set("state", *state)
	}
	if *limit > 0 {
		q.Set("limit", fmt.Sprint(*limit))
	}
	if *cursor != "" {
		q.Set("cursor", *cursor)
	}
	var out struct {
		Consumers  []object `json:"consumers"`
		NextCursor string   `json:"next_cursor,omitempty"`
	}
	if err := c.api.do(ctx, http.MethodGet, *pattern, q, nil, &out); err != nil {
		return err
	}
	cols := consumerColumns
	if dead {
		cols = deadColumns
	}
	if err := c.print(out, cols, out.Consumers...); err != nil || c.json || out.NextCursor == "" {
		return err
	}
	_, err = fmt.Fprintf(c.out, "next page: --cursor %s\n", out.NextCursor)
	return err
}

func (c *cli) deliveries(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("deliveries", flag.ContinueOnError)
	pattern := fs.String("pattern", "/**", "pattern the subscription is found under")
	pos, err := flags(fs, args, 2)
	if err != nil {
		return err
	}
	q := on(pos[0], "deliveries")
	q.Set("consumer", pos[1])
	var out struct {
		Deliveries []object `json:"deliveries"`
	}
	if err := c.api.do(ctx, http.MethodGet, *pattern, q, nil, &out); err != nil {
		return err
	}
	return c.print(out, deliveryColumns, out.Deliveries...)
}

func (c *cli) rewind(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("rewind", flag.ContinueOnError)
	pattern := fs.String("pattern", "/**", "pattern the subscription is found under")
	offset := fs.String("offset", "", `offset to rewind to ("-1": the streams' start)`)
	at := fs.String("time", "", "time to rewind to, RFC 3339")
	consumer := fs.String("consumer", "", "rewind only this consumer")
	pos, err := flags(fs, args, 1)
	if err != nil {
		return err
	}
	body := object{}
	switch {
	case (*offset == "") == (*at == ""):
		return usageError("rewind takes one of --offset and --time")
	case *offset != "":
		body["offset"] = *offset
	default:
		t, err := time.Parse(time.RFC3339Nano, *at)
		if err != nil {
			return usageError("--time: %v", err)
		}
		body["at"] = t
	}
	if *consumer != "" {
		body["consumer"] = *consumer
	}
	var out object
	if err := c.api.do(ctx, http.MethodPost, *pattern, on(pos[0], "rewind"), body, &out); err != nil {
		return err
	}
	return c.print(out, []column{{"REWOUND", "rewound"}}, out)
}

func (c *cli) revive(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("revive", flag.ContinueOnError)
	pattern := fs.String("pattern", "/**", "pattern the subscription is found under")
	pos, err := flags(fs, args, 2)
	if err != nil {
		return err
	}
	var out object
	if err := c.api.do(ctx, http.MethodPost, *pattern, on(pos[0], "revive"), object{"consumer": pos[1]}, &out); err != nil {
		return err
	}
	return c.print(out, consumerColumns, out)
}

func (c *cli) test(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	pattern := fs.String("pattern", "/**", "pattern the subscription is found under")
	pos, err := flags(fs, args, 1)
	if err != nil {
		return err
	}
	var out object
	if err := c.api.do(ctx, http.MethodPost, *pattern, on(pos[0], "test"), nil, &out); err != nil {
		return err
	}
	return c.print(out, testColumns, out)
}

func (c *cli) rotate(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("rotate", flag.ContinueOnError)
	pattern := fs.String("pattern", "/**", "pattern the subscription is found under")
	overlap := fs.Duration("overlap", 0, "how long the previous secret stays valid (default the API's)")
	pos, err := flags(fs, args, 1)
	if err != nil {
		return err
	}
	var body any
	if isSet(fs, "overlap") {
		body = object{"overlap_ms": overlap.Milliseconds()}
	}
	var out object
	if err := c.api.do(ctx, http.MethodPost, *pattern, on(pos[0], "rotate"), body, &out); err != nil {
		return err
	}
	return c.print(out, []column{{"ID", "subscription_id"}, {"SECRET", "webhook_secret"}, {"PREVIOUS SECRET EXPIRES", "previous_secret_expires"}}, out)
}

package exampleserver_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/examples/internal/exampleserver"
)

// browserWait bounds the whole browser test: Chromium's start, the
// retries that dead-letter a consumer, and the screen's polls.
const browserWait = 2 * time.Minute

// chromium returns the path of a Chromium to drive. Under CI a missing one
// fails the test: .ci/run installs it.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is missing; .ci/run installs the Debian package chromium")
	}
	t.Skip("chromium is missing; install the Debian package chromium to run the browser tests")
	return ""
}

// browser starts a headless Chromium on a fresh profile that talks to
// nothing but the pages it is sent to, and returns its context.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	ctx, cancel := context.WithTimeout(context.Background(), browserWait)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
		cancel()
	})
	require.NoError(t, chromedp.Do(bctx), "starting chromium")
	return bctx
}

// screenshot saves the page as ui-name.png among the test's artifacts
// and, if STREAMHOOKS_UI_SCREENSHOTS names a directory (the absolute path
// of docs, to update the README's), there too.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	dirs := []string{t.ArtifactDir()}
	if d := os.Getenv("STREAMHOOKS_UI_SCREENSHOTS"); d != "" {
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		require.NoError(t, os.WriteFile(filepath.Join(d, "ui-"+name+".png"), png, 0o644))
	}
}

// TestUIInBrowser drives the operator's screen in Chromium against the
// example server, with real deliveries: it signs in, watches a failing
// subscription turn unhealthy and its consumer die, reads the dead
// consumer's delivery log, revives it and sees it deliver, and pauses
// and resumes the subscription.
func TestUIInBrowser(t *testing.T) {
	ctx := browser(t)
	const token = "browser-api-token"
	var failing atomic.Bool
	failing.Store(true)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if failing.Load() {
			http.Error(w, "the receiver is down", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(hook.Close)
	srv, err := exampleserver.Start(context.Background(), exampleserver.Config{Addr: "127.0.0.1:0", Dev: true, APIToken: token, Inbox: true,
		InboxSecrets:  map[string]string{"github": inboxSecret},
		EngineOptions: []webhooks.Option{webhooks.WithBackoff(func(int) time.Duration { return 200 * time.Millisecond })}})
	require.NoError(t, err)
	c := &client{hc: &http.Client{Transport: &http.Transport{}}, base: srv.URL}
	t.Cleanup(func() {
		c.hc.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, srv.Close(ctx))
	})
	requireStatus := func(want webhooks.SubscriptionStatus) {
		t.Helper()
		sub, err := srv.Store.GetSubscription(context.Background(), "orders")
		require.NoError(t, err)
		require.Equal(t, want, sub.Status)
	}
	ui := c.base + exampleserver.UIPrefix

	// A subscription that pushes events and gives up after two attempts,
	// and a healthy one beside it.
	resp, body := c.do(t, http.MethodPut, "/orders/*?subscription=orders", "application/json", token,
		[]byte(`{"webhook":"`+hook.URL+`/orders","delivery":"events","description":"order events","retry":{"max_attempts":2}}`))
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", body)
	resp, body = c.do(t, http.MethodPut, "/agents/*?subscription=agents", "application/json", token,
		[]byte(`{"webhook":"`+hook.URL+`/agents","description":"agent wake-ups"}`))
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", body)

	// Signing in: the screen sends a browser without a session to the form.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(ui+"/"),
		chromedp.WaitVisible(chromedp.ID("token")),
	))
	screenshot(t, ctx, "login")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("subscriptions")),
	))

	// The subscription's page, open while its first delivery fails: health
	// and counts change without a reload.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(ui+"/subscription?id=orders"),
		chromedp.WaitVisible(chromedp.CSS(`#health[data-value="healthy"]`)),
	))
	const stream = "/orders/1"
	resp, body = c.do(t, http.MethodPut, stream, "application/json", token, nil)
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", body)
	resp, body = c.do(t, http.MethodPost, stream, "application/json", token, []byte(`[{"type":"order.created","id":1}]`))
	require.Equal(t, http.StatusNoContent, resp.StatusCode, "%s", body)
	tail := resp.Header.Get("Stream-Next-Offset")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.WaitVisible(chromedp.CSS(`#health[data-value="unhealthy"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#count-FAILED[data-value="1"]`)),
	))
	// Consumers that appeared since the page loaded are listed on reload.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(`#consumers .state[data-value="FAILED"]`)),
	))
	screenshot(t, ctx, "subscription")

	// The subscriptions, and the dead letters, whence the dead consumer.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(ui+"/"),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-subscription="orders"] .health[data-value="unhealthy"]`)),
	))
	screenshot(t, ctx, "subscriptions")
	consumer := webhooks.ConsumerID("orders", stream)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(ui+"/dead"),
		chromedp.WaitVisible(chromedp.CSS(`#dead a[href*="consumer?id="]`)),
	))
	screenshot(t, ctx, "dead")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#dead a[href*="consumer?id="]`)),
		chromedp.WaitVisible(chromedp.CSS(`#state[data-value="FAILED"]`)),
	))
	log, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("log")))
	require.NoError(t, err)
	require.Contains(t, log, "status_5xx")
	require.Contains(t, log, "500")
	screenshot(t, ctx, "consumer")

	// Revived, it delivers to the receiver, now up: its cursor reaches the
	// stream's tail on the page.
	failing.Store(false)
	streamCell := `[data-live="stream/` + stream + `"][data-value="` + tail + `"]`
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("revive")),
		chromedp.WaitVisible(chromedp.CSS(`.done`)),
		chromedp.WaitVisible(chromedp.CSS(streamCell)),
		chromedp.WaitVisible(chromedp.CSS(`#state[data-value="IDLE"]`)),
	))
	got, err := srv.Store.GetConsumer(context.Background(), consumer)
	require.NoError(t, err)
	require.Equal(t, tail, got.Streams[0].Offset)

	// Pause and resume.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(ui+"/subscription?id=orders"),
		chromedp.Click(chromedp.ID("pause")),
		chromedp.WaitVisible(chromedp.CSS(`#status[data-value="paused"]`)),
		chromedp.WaitVisible(chromedp.ID("resume")),
	))
	requireStatus(webhooks.StatusPaused)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("resume")),
		chromedp.WaitVisible(chromedp.CSS(`#status[data-value="active"]`)),
		chromedp.WaitVisible(chromedp.ID("pause")),
	))
	requireStatus(webhooks.StatusActive)

	// The inbox the example server mounts: a GitHub delivery, and a
	// forgery, which is dead-lettered, and replayed.
	body = []byte("{\n  \"zen\": \"Design for failure.\",\n  \"hook_id\": 42,\n  \"action\":\"opened\"\n}")
	const signature = "sha256=8a0f56490645b68b57f0dba4a14a60730a3686e5494d04b912dd7da09dcfc1fa"
	require.Equal(t, http.StatusAccepted, c.post(t, "/inbox/github", body, "Content-Type", "application/json",
		"X-GitHub-Delivery", "d-1", "X-GitHub-Event", "issues", "X-Hub-Signature-256", signature).StatusCode)
	require.Equal(t, http.StatusAccepted, c.post(t, "/inbox/github", body, "Content-Type", "application/json",
		"X-GitHub-Delivery", "d-2", "X-GitHub-Event", "issues", "X-Hub-Signature-256", "sha256=00").StatusCode)
	c.awaitEvent(t, "/inbox/github/dead", token)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(ui+"/inbox?provider=github"),
		chromedp.WaitVisible(chromedp.CSS(`#inbox code.body`)),
	))
	screenshot(t, ctx, "inbox")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(ui+"/inbox?provider=github&kind=dead"),
		chromedp.WaitVisible(chromedp.CSS(`#inbox button`)),
	))
	screenshot(t, ctx, "inbox-dead")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#inbox button`)),
		chromedp.WaitVisible(chromedp.CSS(`.done`)),
	))
}

// inboxSecret signs the GitHub deliveries of the browser test, as in
// TestInboxEndToEnd.
const inboxSecret = "e2e-github-secret"

// awaitEvent waits, by long-polls with the API token, until the stream at
// path holds an event.
func (c *client) awaitEvent(t *testing.T, path, token string) {
	t.Helper()
	offset := "-1"
	for {
		q := "?offset=" + offset
		if offset != "-1" {
			q += "&live=long-poll"
		}
		resp, data := c.do(t, http.MethodGet, path+q, "", token, nil)
		require.Contains(t, []int{http.StatusOK, http.StatusNoContent}, resp.StatusCode, "%s", data)
		if len(data) > 0 && string(data) != "[]" {
			return
		}
		offset = resp.Header.Get("Stream-Next-Offset")
	}
}

package webhooks

// SignalWebhookKeysRefreshed makes e send on ch after each periodic reread
// of its webhook signing keys. Call it before Start.
func SignalWebhookKeysRefreshed(e *Engine, ch chan<- struct{}) { e.signals.webhookKeysReread.Set(ch) }

// SigningKeyID is the kid of the key that signs e's Ed25519 deliveries
// now, by e's clock.
func SigningKeyID(e *Engine) string { return e.keys.signing(e.clock.Now()).kid }

// WebhookKeyRefresh is how often an engine rereads its webhook keys.
const WebhookKeyRefresh = webhookKeyRefresh

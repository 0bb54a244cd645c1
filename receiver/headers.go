package receiver

// The headers of every POST the engine sends, in both delivery modes and
// both signature schemes. Their names are those of Standard Webhooks;
// spec 001 names only SignatureHeader.
const (
	// SignatureHeader carries the signature: "t=<unix>,sha256=<hex>" in
	// spec 001's scheme, "v1,<base64>" in Standard Webhooks'. During a
	// secret rotation it carries two, one per secret.
	SignatureHeader = "Webhook-Signature"
	// IDHeader carries the delivery id: the same for every attempt of a
	// delivery, so that a receiver can recognise a retry (see Dedup).
	IDHeader = "Webhook-Id"
	// TimestampHeader carries the Unix time, in seconds, at which the
	// POST was signed.
	TimestampHeader = "Webhook-Timestamp"
	// EventTypeHeader carries, on an event-push POST whose subscription
	// filters on a field, the string at that field that every event of
	// the batch shares, such as "order.created" (seed 002's Event-Type).
	// It is absent when the events' values differ or one has none.
	EventTypeHeader = "Webhook-Event-Type"
)

// Package receiver is for the other end of a webhook: a Go program that
// receives what a streamhooks engine sends. It imports the standard
// library only, so a serverless handler that verifies a signature does not
// pull in the engine and its dependencies.
//
// It has:
//   - a Verifier for every signature scheme the engine sends: spec 001's
//     "t=<unix>,sha256=<hex>" HMAC and Standard Webhooks' "v1,<base64>",
//     with either of two secrets during a rotation, and the Ed25519
//     "t=<unix>,kid=<key id>,ed25519=<base64url>" of the Durable Streams
//     protocol, with the keys of the engine's JWKS, fetched and cached;
//   - the wire types of both delivery modes, a wake-up Notification and an
//     event-push EventsPayload, and the Verifier methods that read, verify
//     and decode them from a request;
//   - the CallbackClient a woken consumer reports progress with;
//   - Dedup, which keeps a delivery that came twice under one Webhook-Id
//     from being handled twice.
package receiver

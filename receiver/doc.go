// Package receiver is for the other end of a webhook: a Go program that
// receives what a streamhooks engine sends. It imports the standard
// library only, so a serverless handler that verifies a signature does not
// pull in the engine and its dependencies.
//
// It has:
//   - a Verifier for every signature scheme the engine sends: spec 001's
//     "t=<unix>,sha256=<hex>" HMAC and Standard Webhooks' "v1,<base64>",
//     with either of two secrets during a rotation;
//   - the wire types of both delivery modes, a wake-up Notification and an
//     event-push EventsPayload, and the Verifier methods that read, verify
//     and decode them from a request;
//   - the CallbackClient a woken consumer reports progress with;
//   - Dedup, which keeps a delivery that came twice under one Webhook-Id
//     from being handled twice.
//
// # Signature schemes to come
//
// Ed25519 signatures, "t=<unix>,kid=<key id>,ed25519=<base64>", whose
// public keys a JWKS publishes, will be one more Option of NewVerifier (a
// JWKS URL and its cache); Verify takes a context already so that it can
// fetch a key set it has not cached, and it tells the schemes apart by the
// header's shape, so no caller changes.
package receiver

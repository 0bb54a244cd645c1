// Package openapi holds the OpenAPI 3.1 document of every HTTP route the
// webhook engine serves, as the example server mounts it: the subscription
// API and its operator routes, the callback API, the inbox and the
// example server's probes. The example server serves it at /openapi.json.
package openapi

import _ "embed"

// Document is the OpenAPI 3.1 document, JSON.
//
//go:embed openapi.json
var Document []byte

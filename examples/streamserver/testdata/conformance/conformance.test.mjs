// Runs the published Durable Streams conformance suite, with its opt-in
// subscription tests, against the server at $CONFORMANCE_TEST_URL.
// ../../conformance_test.go starts the example server and runs this file
// under vitest, choosing the groups with -t.
import { runConformanceTests } from "@durable-streams/server-conformance-tests"

const baseUrl = process.env.CONFORMANCE_TEST_URL
if (!baseUrl) {
  throw new Error("CONFORMANCE_TEST_URL is required")
}
runConformanceTests({ baseUrl, subscriptions: true })

// The suite's tests share one server; running them one file, one test at a
// time keeps its timing assumptions (long-polls, waits for webhooks).
export default {
  test: {
    include: ["conformance.test.mjs"],
    testTimeout: 30000,
    fileParallelism: false,
  },
}

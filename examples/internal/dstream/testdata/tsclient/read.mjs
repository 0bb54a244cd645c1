// Reads a Durable Stream with the official TypeScript client and prints one
// JSON line, so the Go test (../../tsclient_test.go) can check what the client
// understood of the server's responses.
//
//   node read.mjs catchup URL          catch-up read from -1, stops when up to date
//   node read.mjs live URL OFFSET      long-poll read from OFFSET, stops at the first data
//
// Output: {"items": [...]} for JSON streams or {"text": "..."} for byte
// streams, plus "offset" (the client's Stream-Next-Offset) and "upToDate".
import { stream } from "@durable-streams/client"

const [mode, url, offset] = process.argv.slice(2)

function print(result) {
  process.stdout.write(JSON.stringify(result) + "\n", () => process.exit(0))
}

async function catchup() {
  const res = await stream({ url, offset: "-1", live: false })
  const isJson = (res.contentType ?? "").includes("application/json")
  const data = isJson ? { items: await res.json() } : { text: await res.text() }
  print({ ...data, offset: res.offset, upToDate: res.upToDate })
}

async function live() {
  const controller = new AbortController()
  const res = await stream({ url, offset, live: "long-poll", signal: controller.signal })
  const done = (result) => {
    controller.abort()
    print(result)
  }
  if ((res.contentType ?? "").includes("application/json")) {
    res.subscribeJson((batch) => {
      if (batch.items.length > 0) {
        done({ items: batch.items, offset: batch.offset, upToDate: batch.upToDate })
      }
    })
  } else {
    const decoder = new TextDecoder()
    res.subscribeBytes((chunk) => {
      if (chunk.data.length > 0) {
        done({ text: decoder.decode(chunk.data), offset: chunk.offset, upToDate: chunk.upToDate })
      }
    })
  }
}

const modes = { catchup, live }
if (!modes[mode] || !url || (mode === "live" && !offset)) {
  process.stderr.write("usage: node read.mjs catchup URL | live URL OFFSET\n")
  process.exit(2)
}
modes[mode]().catch((err) => {
  process.stderr.write(`${err?.stack ?? err}\n`)
  process.exit(1)
})

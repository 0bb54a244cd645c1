// Runs the RFC's reference verifyWebhookSignature, verbatim but for its
// TypeScript types, so Go tests can prove it accepts our signatures.
//
// Usage: node verify_signature.mjs <header> <secret> < body
// Exit status: 0 verified, 1 rejected, 2 the verifier threw.
import { createHmac, timingSafeEqual } from 'crypto'
import { readFileSync } from 'fs'

function verifyWebhookSignature(
  body,
  signatureHeader,
  secret,
  toleranceSeconds = 300
) {
  const match = signatureHeader.match(/t=(\d+),sha256=([a-f0-9]+)/)
  if (!match) return false

  const [, timestamp, signature] = match
  const ts = parseInt(timestamp, 10)

  // Check timestamp is within tolerance
  const now = Math.floor(Date.now() / 1000)
  if (Math.abs(now - ts) > toleranceSeconds) return false

  // Compute expected signature
  const payload = `${timestamp}.${body}`
  const expected = createHmac('sha256', secret)
    .update(payload)
    .digest('hex')

  // Constant-time comparison
  return timingSafeEqual(Buffer.from(signature), Buffer.from(expected))
}

const [header, secret] = process.argv.slice(2)
const body = readFileSync(0, 'utf8')
let ok
try {
  ok = verifyWebhookSignature(body, header, secret)
} catch (err) {
  console.error(err)
  process.exit(2)
}
process.exit(ok ? 0 : 1)

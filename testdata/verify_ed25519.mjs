// Verifies an Ed25519 webhook signature as the Durable Streams protocol
// (section 7.1) describes it, with node's crypto alone: the key is
// selected by kid from the JWKS and imported from its JWK, and the
// signature checked over "<t>.<raw body>".
//
// Usage: node verify_ed25519.mjs <header> <jwks json> <now unix> < body
// Exit status: 0 verified, 1 rejected, 2 the verifier threw.
import { createPublicKey, verify } from 'crypto'
import { readFileSync } from 'fs'

function verifyEd25519(body, header, jwks, now, toleranceSeconds = 300) {
  const match = header.match(/^t=(\d+),kid=([^,]+),ed25519=([A-Za-z0-9_-]+)$/)
  if (!match) return false
  const [, timestamp, kid, signature] = match
  if (Math.abs(now - parseInt(timestamp, 10)) > toleranceSeconds) return false
  const jwk = jwks.keys.find((k) => k.kid === kid)
  if (!jwk || jwk.kty !== 'OKP' || jwk.crv !== 'Ed25519' || jwk.alg !== 'EdDSA' || jwk.use !== 'sig') return false
  const key = createPublicKey({ key: { kty: jwk.kty, crv: jwk.crv, x: jwk.x }, format: 'jwk' })
  const data = Buffer.concat([Buffer.from(`${timestamp}.`), body])
  return verify(null, data, key, Buffer.from(signature, 'base64url'))
}

const [header, jwks, now] = process.argv.slice(2)
const body = readFileSync(0)
let ok
try {
  ok = verifyEd25519(body, header, JSON.parse(jwks), parseInt(now, 10))
} catch (err) {
  console.error(err)
  process.exit(2)
}
process.exit(ok ? 0 : 1)

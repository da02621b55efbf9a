// The ceiling: a bare Fastify server, no plugins, answering a constant of the length the key
// names (`/api/ceiling/get/5`: 5 bytes), so each route is compared with a body as long as its
// own. Plain JavaScript run by node directly, so nothing but Fastify separates it from the wire.
import Fastify from 'fastify'

const DIGITS = '2127220875605311515'.repeat(2)
const BODIES = new Map(Array.from({ length: DIGITS.length }, (_, i) => [String(i + 1), DIGITS.slice(0, i + 1)]))
const app = Fastify({ logger: false })
app.get('/api/ceiling/get/:key', (request, reply) => {
  const body = BODIES.get(request.params.key)
  if (body === undefined) reply.code(404).send()
  else reply.type('text/plain; charset=utf-8').send(body)
})
const address = await app.listen({ host: '127.0.0.1', port: 0 })
process.stdout.write(`Server listening at ${address}\n`)
process.on('SIGTERM', () => app.close().then(() => process.exit(0)))

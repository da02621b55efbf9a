// The ceiling: a bare Fastify server, no plugins, answering a constant as long as an ID.
// Plain JavaScript run by node directly, so nothing but Fastify separates it from the wire.
import Fastify from 'fastify'

const BODY = '2127220875605311515'
const app = Fastify({ logger: false })
app.get('/api/ceiling/get/:key', (request, reply) => {
  reply.type('text/plain; charset=utf-8').send(BODY)
})
const address = await app.listen({ host: '127.0.0.1', port: 0 })
process.stdout.write(`Server listening at ${address}\n`)
process.on('SIGTERM', () => app.close().then(() => process.exit(0)))

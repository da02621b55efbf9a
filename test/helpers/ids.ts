/**
 * The IDs of a text batch (`?count=N`): one per line, every line ended by a newline, the last
 * one too. Any other text throws, so a batch without its final newline fails the test.
 */
export function batchLines (body: string): string[] {
  if (!/^([^\n]+\n)+$/.test(body)) throw new Error(`not a text batch (one ID per line, each ended by a newline): ...${JSON.stringify(body.slice(-40))}`)
  return body.slice(0, -1).split('\n')
}

/** The IDs of a text answer: a single ID (Leaf's bare decimal) or a batch. */
export function textIds (body: string): string[] {
  return body.endsWith('\n') ? batchLines(body) : [body]
}

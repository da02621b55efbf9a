import type { Test } from 'tap'
import type { TypedChannel } from '../../src/channels.js'

/** Calls `onMessage` for each message of `channel` until the test ends. */
export function listen<T> (t: Test, channel: TypedChannel<T>, onMessage: (message: T) => void): void {
  const handler = (message: T) => onMessage(message)
  channel.subscribe(handler)
  t.teardown(() => { channel.unsubscribe(handler) })
}

import { LeaseRefused } from '../../errors.js'
import type { Layout } from '../../layout/layout.js'
import { CreateMode, isNoNode, isNodeExists, zk, type Client } from './zookeeper-client.js'

// Two layouts under one leaf.name can make the same number from different fields, so every pool
// records its first instance's layout: docs/id-layouts.md#the-layout-is-part-of-the-fleets-identity

/**
 * Refuses when `recorded` (undefined: none yet) is not this instance's layout, or when there is
 * no record but worker ids were given out already (`used`) and this layout is not Leaf's.
 */
export function checkLayoutRecord (where: string, recorded: string | undefined, used: boolean, layout: Layout): void {
  if (recorded === undefined) {
    if (used && !hasLeafFields(layout)) {
      throw new LeaseRefused('LEASE_LAYOUT_MISMATCH', `${where} gave out worker ids before layouts were recorded, so under Leaf's layout, and this instance's layout is ${layout.spec}: ` +
        'mixed layouts under one leaf.name would make the same ID twice. Use another leaf.name (a pool of its own) for the new layout')
    }
    return
  }
  if (recorded !== layout.signature) {
    throw new LeaseRefused('LEASE_LAYOUT_MISMATCH', `${where} records the ID layout "${recorded}", and this instance's is "${layout.signature}" (${layout.spec}): ` +
      'mixed layouts under one leaf.name would make the same ID twice. Start with the recorded layout, or use another leaf.name (a pool of its own) for the new one')
  }
}

/** Leaf's fields, whatever the epoch: the name alone is not enough (`leaf,worker=8` is called `leaf` too). */
function hasLeafFields (layout: Layout): boolean {
  return layout.unit === 'ms' && layout.fields.map((field) => `${field.name}=${field.bits}${field.value === undefined ? '' : `:${field.value}`}`).join() === 'time=41,worker=10,sequence=12'
}

/** The layout record of a ZooKeeper tree, `/snowflake/<name>/layout` (zookeeper and zookeeper-lease). */
export async function recordZookeeperLayout (client: Client, name: string, layout: Layout): Promise<void> {
  const base = `/snowflake/${name}`
  const path = `${base}/layout`
  const where = `ZooKeeper ${path}`
  let node = await zk.getWithStat(client, path)
  if (node === undefined) {
    const used = (await childCount(client, `${base}/forever`)) + (await childCount(client, `${base}/lease/issued`)) > 0
    checkLayoutRecord(where, undefined, used, layout)
    await zk.mkdirp(client, base)
    try {
      await zk.create(client, path, layout.signature, CreateMode.PERSISTENT)
      return
    } catch (err) {
      if (!isNodeExists(err)) throw err
    }
    // Another instance recorded one meanwhile: it must be ours.
    node = await zk.getWithStat(client, path)
  }
  checkLayoutRecord(where, node?.data?.toString('utf8') ?? '', true, layout)
}

async function childCount (client: Client, path: string): Promise<number> {
  try {
    return (await zk.getChildren(client, path)).length
  } catch (err) {
    if (isNoNode(err)) return 0
    throw err
  }
}

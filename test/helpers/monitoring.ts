import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { parser } from '@prometheus-io/lezer-promql'
import { parse as parseYaml } from 'yaml'
import { ROOT } from './server-process.js'

// The PromQL of config/alerts.yml and of the Grafana dashboard, read from the files the stack
// loads: test/e2e/monitoring.test.ts runs every expression against a real Prometheus, and
// test/e2e/packaging.test.ts checks that every panel target is among them.

export const ALERTS_FILE = 'config/alerts.yml'
export const DASHBOARD_FILE = 'config/grafana/dashboards/leaf-ts.json'

export interface Rule { alert: string, expr: string, for?: string, labels?: Record<string, string>, annotations?: Record<string, string> }

export function alertRules (): Rule[] {
  const file = parseYaml(readFileSync(join(ROOT, ALERTS_FILE), 'utf8')) as { groups: { name: string, rules: Rule[] }[] }
  return file.groups.flatMap((g) => g.rules)
}

export interface Target { refId: string, expr?: string, datasource?: { type?: string, uid?: string } }
export interface Panel { id: number, type: string, title: string, targets?: Target[], panels?: Panel[], datasource?: { type?: string, uid?: string } }
export interface Variable { name: string, type: string, query?: string | { query?: string }, definition?: string, datasource?: { uid?: string } }
export interface Dashboard { uid: string, title: string, panels: Panel[], templating: { list: Variable[] } }

export function readDashboard (): Dashboard {
  return JSON.parse(readFileSync(join(ROOT, DASHBOARD_FILE), 'utf8')) as Dashboard
}

/** Every panel but rows, those inside collapsed rows included. */
export function dashboardPanels (dashboard: Dashboard): Panel[] {
  return dashboard.panels.flatMap((p) => p.type === 'row' ? (p.panels ?? []) : [p])
}

export interface Query { where: string, expr: string }

/**
 * The dashboard's PromQL: each panel target's expr, and the series each query variable takes
 * its values from (`label_values(metric, label)`).
 */
export function dashboardQueries (dashboard: Dashboard): Query[] {
  const queries: Query[] = []
  for (const panel of dashboardPanels(dashboard)) {
    for (const target of panel.targets ?? []) {
      queries.push({ where: `panel "${panel.title}" target ${target.refId}`, expr: target.expr ?? '' })
    }
  }
  for (const variable of dashboard.templating.list.filter((v) => v.type === 'query')) {
    const query = typeof variable.query === 'string' ? variable.query : variable.query?.query ?? ''
    const m = /^label_values\((.+),\s*\w+\)$/.exec(query)
    if (m === null) throw new Error(`variable ${variable.name}: not a label_values(series, label) query: ${query}`)
    queries.push({ where: `variable $${variable.name}`, expr: m[1] as string })
  }
  return queries
}

/** Grafana's variables and macros as the dashboard sees them with every instance selected. */
export function asPromql (expr: string, rateInterval = '1m'): string {
  return expr
    .replace(/\$__rate_interval|\$\{__rate_interval\}|\$__interval|\$\{__interval\}|\$__range|\$\{__range\}/g, rateInterval)
    .replace(/\$instance|\$\{instance\}/g, '.+')
}

/** The series selectors of a PromQL expression (`name{matchers}`, without ranges or offsets). */
export function selectors (expr: string): string[] {
  const tree = parser.parse(expr)
  const found: string[] = []
  let error: number | undefined
  tree.iterate({
    enter (node) {
      if (node.type.isError) error ??= node.from
      if (node.name === 'VectorSelector') found.push(expr.slice(node.from, node.to))
    },
  })
  if (error !== undefined) throw new Error(`PromQL does not parse at ${error}: ${expr}`)
  return [...new Set(found)]
}

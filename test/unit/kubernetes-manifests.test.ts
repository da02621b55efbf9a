import { readFileSync, readdirSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { parseAllDocuments } from 'yaml'
import { KUBERNETES_VERSION, manifestErrors } from '../helpers/kubernetes.js'

// config/kubernetes/ against the Kubernetes API schema (kubernetes-models, generated from
// Kubernetes 1.36's OpenAPI), and the parts that make it run as written: an image the docs
// say to build and push, pulled only when missing, and a pod that can write its volume.

const ROOT = new URL('../../', import.meta.url).pathname
const DIR = join(ROOT, 'config/kubernetes')
const FILES = readdirSync(DIR).filter((f) => f.endsWith('.yaml')).sort()
const VERSION = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version
/** The reference the manifests and the docs give: a registry the user replaces, this version. */
const IMAGE = `registry.example.com/leaf-ts:${VERSION}`

function documents (file: string): unknown[] {
  return parseAllDocuments(readFileSync(join(DIR, file), 'utf8')).map((d) => d.toJS() as unknown)
}

interface Workload {
  kind: string
  spec: { template: { spec: { securityContext?: { fsGroup?: number, runAsUser?: number, runAsGroup?: number }, containers: Array<{ image?: string, imagePullPolicy?: string }> } } }
}

t.test(`every manifest validates against Kubernetes ${KUBERNETES_VERSION}'s schema`, async (t) => {
  t.same(FILES, ['db-lease.yaml', 'production.yaml', 'statefulset.yaml'])
  for (const file of FILES) {
    const docs = documents(file)
    t.ok(docs.length >= 3, `${file}: ${docs.length} documents`)
    for (const doc of docs) t.same(manifestErrors(doc), [], `${file}: ${(doc as { kind?: string }).kind}`)
  }
})

t.test('the validator refuses a document that breaks the schema, and an API version the release does not serve', async (t) => {
  interface Doc {
    apiVersion: string
    kind: string
    metadata: { name: string }
    spec: {
      replicas?: unknown
      selector?: unknown
      template: { metadata: { labels: Record<string, string> }, spec: { securityContext: Record<string, unknown>, containers: Record<string, unknown>[] } }
    }
  }
  const valid = (): Doc => ({
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: 'leaf' },
    spec: {
      selector: { matchLabels: { app: 'leaf' } },
      template: { metadata: { labels: { app: 'leaf' } }, spec: { securityContext: { fsGroup: 1000 }, containers: [{ name: 'leaf', image: IMAGE, imagePullPolicy: 'IfNotPresent' }] } },
    },
  })
  t.same(manifestErrors(valid()), [], 'the valid one passes')
  const broken: Array<[string, (d: Doc) => unknown, RegExp]> = [
    ['replicas as a word', (d) => { d.spec.replicas = 'three'; return d }, /spec\/replicas must be integer/],
    ['an imagePullPolicy Kubernetes does not know', (d) => { d.spec.template.spec.containers = [{ name: 'leaf', image: IMAGE, imagePullPolicy: 'Sometimes' }]; return d }, /imagePullPolicy must be equal to one of the allowed values/],
    ['a container without a name', (d) => { d.spec.template.spec.containers = [{ image: IMAGE }]; return d }, /containers\/0 must have required property name/],
    ['fsGroup as a string', (d) => { d.spec.template.spec.securityContext.fsGroup = '1000'; return d }, /fsGroup must be integer/],
    ['a Deployment without its selector', (d) => { delete d.spec.selector; return d }, /data\/spec must have required property selector/],
    ['apps/v1beta1, removed in Kubernetes 1.16', (d) => ({ ...d, apiVersion: 'apps/v1beta1' }), /apps\/v1beta1 Deployment leaf: not a kind at an API version these manifests use on Kubernetes 1\.36\.0/],
    ['policy/v1beta1 PodDisruptionBudget, removed in 1.25', () => ({ apiVersion: 'policy/v1beta1', kind: 'PodDisruptionBudget', metadata: { name: 'leaf' }, spec: { maxUnavailable: 1 } }), /not a kind at an API version/],
    ['no kind at all', () => ({ metadata: { name: 'x' } }), /undefined undefined x: not a kind/],
  ]
  for (const [what, breakIt, expected] of broken) {
    const errors = manifestErrors(breakIt(valid()))
    t.equal(errors.length, 1, `${what}: refused`)
    t.match(errors[0], expected, `${what}: ${errors[0]}`)
  }
})

t.test('each workload runs as written: the documented image, pulled when missing, a pod that can write its volume', async (t) => {
  // The official Node images' `node` user, which the Dockerfile's runtime stage runs as, is uid
  // and gid 1000.
  const dockerfile = readFileSync(join(ROOT, 'Dockerfile'), 'utf8')
  t.match(dockerfile, /^USER node$/m, 'the image runs as node')
  for (const file of FILES) {
    const workload = documents(file).find((d) => ['Deployment', 'StatefulSet'].includes((d as Workload).kind)) as Workload | undefined
    if (workload === undefined) {
      t.fail(`${file}: no Deployment or StatefulSet`)
      continue
    }
    const pod = workload.spec.template.spec
    for (const c of pod.containers) {
      t.equal(c.image, IMAGE, `${file}: image ${IMAGE} (package.json's version)`)
      t.equal(c.imagePullPolicy, 'IfNotPresent', `${file}: pulled only when the node does not hold it`)
    }
    t.same(pod.securityContext, { runAsUser: 1000, runAsGroup: 1000, fsGroup: 1000 }, `${file}: the node user, and its group owns the volumes`)
  }
})

t.test('the docs say how to build and push that image', async (t) => {
  const pages = ['docs/production.md', 'docs/docker.md'].map((p) => readFileSync(join(ROOT, p), 'utf8')).join('\n')
  t.ok(pages.includes(`docker build -t ${IMAGE} .`), `docker build -t ${IMAGE} .`)
  t.ok(pages.includes(`docker push ${IMAGE}`), `docker push ${IMAGE}`)
  t.ok(pages.includes('config/kubernetes/'), 'and name the manifests whose reference to edit')
})

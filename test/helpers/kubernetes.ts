import { Deployment, StatefulSet } from 'kubernetes-models/apps/v1'
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1'
import { Secret, Service } from 'kubernetes-models/v1'

/**
 * The Kubernetes release whose OpenAPI schema kubernetes-models validates with: its 5.x
 * releases are generated from Kubernetes v1.36.0 (its CHANGELOG, 5.0.0: "Update to Kubernetes
 * v1.36.0"; 5.1.0 only exports the schema files).
 */
export const KUBERNETES_VERSION = '1.36.0'

interface Model { validate (): void }

/**
 * The kinds config/kubernetes/ uses, each at an API version Kubernetes 1.36 serves. The models
 * also hold APIs that Kubernetes removed (the package merges older specs, such as
 * policy/v1beta1 PodDisruptionBudget, removed in 1.25), so the versions are named here rather
 * than looked up: a manifest at any other apiVersion is refused.
 */
const MODELS: Record<string, new (data: never) => Model> = {
  'v1 Secret': Secret,
  'v1 Service': Service,
  'apps/v1 Deployment': Deployment,
  'apps/v1 StatefulSet': StatefulSet,
  'policy/v1 PodDisruptionBudget': PodDisruptionBudget,
}

/** What is wrong with one manifest document against Kubernetes 1.36's schema; empty when nothing. */
export function manifestErrors (doc: unknown): string[] {
  const { apiVersion, kind, metadata } = (doc ?? {}) as { apiVersion?: unknown, kind?: unknown, metadata?: { name?: unknown } }
  const what = `${String(apiVersion)} ${String(kind)} ${String(metadata?.name)}`
  const Model = MODELS[`${String(apiVersion)} ${String(kind)}`]
  if (Model === undefined) return [`${what}: not a kind at an API version these manifests use on Kubernetes ${KUBERNETES_VERSION} (${Object.keys(MODELS).join(', ')})`]
  try {
    new Model(doc as never).validate()
    return []
  } catch (err) {
    return [`${what}: ${(err as Error).message}`]
  }
}

{{/* The chart's name: nameOverride, else the chart's. */}}
{{- define "groupops.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The prefix of every object's name: fullnameOverride, else the release name when it already holds
the name, else <release>-<name>. 53 characters at most, so that `<fullname>-heartbeat` (a
Service: 63 at most) still fits.
*/}}
{{- define "groupops.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 53 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 53 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 53 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "groupops.labels" -}}
app.kubernetes.io/name: {{ include "groupops.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "groupops.selectorLabels" -}}
app.kubernetes.io/name: {{ include "groupops.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "groupops.serviceAccountName" -}}
{{- default (include "groupops.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "groupops.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The namespaces the operator watches in scope namespaced, comma-separated. */}}
{{- define "groupops.watchNamespaces" -}}
{{- if .Values.watchNamespaces -}}
{{- join "," .Values.watchNamespaces -}}
{{- else -}}
{{- .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{/*
kafkaAuthSecrets grouped by namespace, as YAML {namespace: [name, ...]} (names sorted, once
each). In scope namespaced a namespace the operator does not watch is an error: no policy there
is ever reconciled, so the Role would grant a read nothing needs.
*/}}
{{- define "groupops.authSecretsByNamespace" -}}
{{- $byNamespace := dict -}}
{{- $watched := splitList "," (include "groupops.watchNamespaces" .) -}}
{{- range $i, $secret := .Values.kafkaAuthSecrets -}}
{{- if and (eq $.Values.scope "namespaced") (not (has $secret.namespace $watched)) -}}
{{- fail (printf "kafkaAuthSecrets[%d].namespace %q is not watched: with scope=namespaced add it to watchNamespaces (%s)" $i $secret.namespace (join ", " $watched)) -}}
{{- end -}}
{{- $names := get $byNamespace $secret.namespace | default list -}}
{{- $_ := set $byNamespace $secret.namespace (append $names $secret.name | uniq | sortAlpha) -}}
{{- end -}}
{{- toYaml $byNamespace -}}
{{- end -}}

{{/*
The operator's rules in a namespace it watches, shared by the ClusterRole (scope cluster) and the
per-namespace Roles (scope namespaced). Each verb is one the operator sends (templates/rbac.yaml
says which code sends it); the comments are rendered nowhere.
*/}}
{{- define "groupops.namespacedRules" -}}
{{- /* kopf lists and watches policies; it patches a policy's metadata only to lift the finalizer
groupops 0.1 put there (the operator writes status only: docs/design.md §13.1); get reveals
nothing list does not. */}}
- apiGroups: [groupops.dev]
  resources: [consumergrouppolicies]
  verbs: [get, list, watch, patch]
{{- /* status: conditions, figures, the epoch, the operator's bookkeeping (merge or apply patch). */}}
- apiGroups: [groupops.dev]
  resources: [consumergrouppolicies/status]
  verbs: [patch]
{{- /* Only checked where OwnerReferencesPermissionEnforcement is on; harmless elsewhere. */}}
- apiGroups: [groupops.dev]
  resources: [consumergrouppolicies/finalizers]
  verbs: [update]
{{- /* Consumer pods: created and deleted, never updated in place (a template change drains
them); patch for server-side apply. */}}
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, patch, delete]
{{- /* Plan ConfigMaps (compare-and-swap replace) and the consumers' ServiceAccount, Role and
RoleBinding, one set per consumer identity; the operator may grant consumers get/watch on their
ConfigMap and get/update on their Leases because it holds those rights itself. */}}
- apiGroups: [""]
  resources: [configmaps, serviceaccounts]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, list, watch, create, update, patch, delete]
{{- /* Consumer Leases: created unheld, fenced (patch), deleted; update is granted to consumers. */}}
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, list, watch, create, update, patch, delete]
{{- /* Events on policies (ours and kopf's, core v1). */}}
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- end -}}

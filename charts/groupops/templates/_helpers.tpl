{{- define "groupops.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "groupops.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "groupops.labels" -}}
app.kubernetes.io/name: {{ include "groupops.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
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

{{- define "groupops.watchNamespaces" -}}
{{- if .Values.watchNamespaces -}}
{{- join "," .Values.watchNamespaces -}}
{{- else -}}
{{- .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{/* The operator's rules, shared by the ClusterRole and the per-namespace Roles. */}}
{{- define "groupops.namespacedRules" -}}
- apiGroups: [groupops.dev]
  resources: [consumergrouppolicies]
  verbs: [get, list, watch, patch, update]
- apiGroups: [groupops.dev]
  resources: [consumergrouppolicies/status]
  verbs: [get, patch, update]
- apiGroups: [groupops.dev]
  resources: [consumergrouppolicies/finalizers]
  verbs: [update]
- apiGroups: [""]
  resources: [pods, configmaps, serviceaccounts]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, list, watch]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, list, watch, create, update, patch, delete]
{{- end -}}

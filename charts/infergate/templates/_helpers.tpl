{{/* Names, labels and image references shared by the templates. */}}

{{- define "infergate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's name for its objects: at most 52 characters, so suffixes such as "-metrics" fit in 63. */}}
{{- define "infergate.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "infergate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "infergate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "infergate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "infergate.labels" -}}
helm.sh/chart: {{ include "infergate.chart" . }}
{{ include "infergate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: infergate
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "infergate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "infergate.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* An image reference: repository@digest when a digest is set, else repository:tag (tag defaults to appVersion). */}}
{{- define "infergate.image" -}}
{{- $image := index . 0 -}}
{{- $root := index . 1 -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $image.repository $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $image.repository (default $root.Chart.AppVersion $image.tag) -}}
{{- end -}}
{{- end -}}

{{/* "true" when leader election is on: asked for, or needed because several replicas run. */}}
{{- define "infergate.leaderElect" -}}
{{- if or .Values.leaderElection.enabled (gt (int .Values.replicaCount) 1) -}}true{{- end -}}
{{- end -}}

{{/* The namespaces in which the operator may get trust-key Secrets, as a list: every watched one, or
rbac.trustSecretNamespaces (default: the release namespace) when every namespace is watched. */}}
{{- define "infergate.trustSecretNamespaces" -}}
{{- if .Values.watchNamespaces -}}
{{- toJson .Values.watchNamespaces -}}
{{- else if .Values.rbac.trustSecretNamespaces -}}
{{- toJson .Values.rbac.trustSecretNamespaces -}}
{{- else -}}
{{- toJson (list .Release.Namespace) -}}
{{- end -}}
{{- end -}}

{{/* A lease timing ("500ms", "10s", "1m") in milliseconds. */}}
{{- define "infergate.ms" -}}
{{- $d := toString . -}}
{{- if hasSuffix "ms" $d -}}{{ trimSuffix "ms" $d | int }}
{{- else if hasSuffix "s" $d -}}{{ mul (trimSuffix "s" $d | int) 1000 }}
{{- else if hasSuffix "m" $d -}}{{ mul (trimSuffix "m" $d | int) 60000 }}
{{- else -}}{{ fail (printf "%s is not a lease timing (a number and ms, s or m)" $d) }}
{{- end -}}
{{- end -}}

{{/* The operator refuses lease timings that are not leaseDuration > renewDeadline > retryPeriod: refuse
them here, at helm template, rather than with an operator that exits at start. */}}
{{- define "infergate.checkLeaderElection" -}}
{{- $l := .Values.leaderElection -}}
{{- $lease := include "infergate.ms" $l.leaseDuration | int -}}
{{- $renew := include "infergate.ms" $l.renewDeadline | int -}}
{{- $retry := include "infergate.ms" $l.retryPeriod | int -}}
{{- if le $renew $retry -}}
{{- fail (printf "leaderElection.renewDeadline (%s) must be longer than leaderElection.retryPeriod (%s)" $l.renewDeadline $l.retryPeriod) -}}
{{- end -}}
{{- if le $lease $renew -}}
{{- fail (printf "leaderElection.leaseDuration (%s) must be longer than leaderElection.renewDeadline (%s)" $l.leaseDuration $l.renewDeadline) -}}
{{- end -}}
{{- end -}}

{{/* The operator's permissions on what it reconciles and owns (a ClusterRole or a Role). */}}
{{- define "infergate.operatorRules" -}}
rules:
  # The models it reconciles.
  - apiGroups: [serving.infergate.dev]
    resources: [inferencemodels]
    verbs: [get, list, watch]
  - apiGroups: [serving.infergate.dev]
    resources: [inferencemodels/status]
    verbs: [get, update]
  # ownerReferences with blockOwnerDeletion need update on the owner's finalizers where the
  # OwnerReferencesPermissionEnforcement admission plugin runs.
  - apiGroups: [serving.infergate.dev]
    resources: [inferencemodels/finalizers]
    verbs: [update]
  # The stable and canary workloads and their Services (server-side apply, scale, delete).
  - apiGroups: [apps]
    resources: [deployments]
    verbs: [get, list, watch, create, patch, delete]
  - apiGroups: [""]
    resources: [services]
    verbs: [get, list, watch, create, patch, delete]
  # Which pods are ready and where; the agent's verdict and the eval Job's result arrive as
  # container termination messages in pod status.
  - apiGroups: [""]
    resources: [pods]
    verbs: [get, list, watch]
  # The quality gate's eval Jobs.
  - apiGroups: [batch]
    resources: [jobs]
    verbs: [get, list, watch, create, delete]
  # Each model's PodDisruptionBudget over its stable pods (server-side apply, delete).
  - apiGroups: [policy]
    resources: [poddisruptionbudgets]
    verbs: [get, list, watch, create, patch, delete]
  # Events on the models.
  - apiGroups: [""]
    resources: [events]
    verbs: [create, patch]
{{- end }}

{{/* Trust-key Secrets: get only (a metadata-only read of the Secret a model names). */}}
{{- define "infergate.secretRule" -}}
- apiGroups: [""]
  resources: [secrets]
  {{- with .Values.rbac.trustSecretNames }}
  resourceNames:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  verbs: [get]
{{- end }}

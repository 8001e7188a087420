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

{{/* The namespaces in which the operator may get trust-key Secrets, as a list. */}}
{{- define "infergate.trustSecretNamespaces" -}}
{{- if .Values.rbac.trustSecretNamespaces -}}
{{- toJson .Values.rbac.trustSecretNamespaces -}}
{{- else -}}
{{- toJson (list (default .Release.Namespace .Values.watchNamespace)) -}}
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
  # Events on the models.
  - apiGroups: [""]
    resources: [events]
    verbs: [create, patch]
{{- end }}

{{/*
Names. Kubernetes names are at most 63 characters (DNS-1123 labels for Services):
fullname is cut there, and the suffixes below keep every name under it.
*/}}
{{- define "antdt.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "antdt.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 46 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 46 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 46 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "antdt.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object; selectors use only antdt.selectorLabels (immutable). */}}
{{- define "antdt.labels" -}}
helm.sh/chart: {{ include "antdt.chart" . }}
{{ include "antdt.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: antdt
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "antdt.selectorLabels" -}}
app.kubernetes.io/name: {{ include "antdt.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "antdt.operator.selectorLabels" -}}
{{ include "antdt.selectorLabels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "antdt.agent.selectorLabels" -}}
{{ include "antdt.selectorLabels" . }}
app.kubernetes.io/component: agent
{{- end }}

{{- define "antdt.operator.serviceAccountName" -}}
{{- if .Values.operator.serviceAccount.create }}
{{- default (printf "%s-operator" (include "antdt.fullname" .)) .Values.operator.serviceAccount.name }}
{{- else }}
{{- required "operator.serviceAccount.name is required when operator.serviceAccount.create is false" .Values.operator.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "antdt.agent.serviceAccountName" -}}
{{- if .Values.agent.serviceAccount.create }}
{{- default (printf "%s-agent" (include "antdt.fullname" .)) .Values.agent.serviceAccount.name }}
{{- else }}
{{- required "agent.serviceAccount.name is required when agent.serviceAccount.create is false" .Values.agent.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The namespace of the agent DaemonSet: its own where Pod Security forbids host access. */}}
{{- define "antdt.agent.namespace" -}}
{{- default .Release.Namespace .Values.agent.namespace }}
{{- end }}

{{- define "antdt.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/* The Service agents reach the acting operator's Monitor through. */}}
{{- define "antdt.monitorService" -}}
{{- printf "%s-monitor" (include "antdt.fullname" .) }}
{{- end }}

{{- define "antdt.monitorAddress" -}}
{{- printf "%s.%s.svc:%d" (include "antdt.monitorService" .) .Release.Namespace (int .Values.operator.monitorPort) }}
{{- end }}

{{/*
The namespaces the operator works in: [""] for the whole cluster, else the list
(operator.watchNamespace).
*/}}
{{- define "antdt.watchNamespaces" -}}
{{- if .Values.operator.watchNamespace }}
{{- list .Values.operator.watchNamespace | toJson }}
{{- else }}
{{- list "" | toJson }}
{{- end }}
{{- end }}

{{/* The base name of every object the chart creates. */}}
{{- define "lifeboat.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-operator" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "lifeboat.serviceAccountName" -}}
{{- .Values.serviceAccount.name | default (include "lifeboat.fullname" .) -}}
{{- end -}}

{{/* Labels that select the operator's pods; immutable once a Deployment exists. */}}
{{- define "lifeboat.selectorLabels" -}}
app.kubernetes.io/name: lifeboat
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "lifeboat.labels" -}}
{{ include "lifeboat.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: lifeboat
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* An image reference from the chart's registry and a {repository, tag} value. */}}
{{- define "lifeboat.image" -}}
{{- $registry := .root.Values.imageRegistry | default "" | trimSuffix "/" -}}
{{- if $registry -}}{{ $registry }}/{{- end -}}{{ .image.repository }}:{{ .image.tag }}
{{- end -}}
